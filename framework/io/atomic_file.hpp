// Whole files and folders. Writing is atomic, so that a kill or a crash never leaves a half-written file in
// place: the bytes go to a temporary file beside the target (temporary_path: path + ".tmp-" + the writer's
// pid), which is flushed, synced and then renamed over the target. Readers see either the old file or the
// new one, never a mix. A folder is replaced by exchanging it with a finished one in one step. What a
// killed writer leaves (its temporaries) is removed by the next writer: remove_stale_temporaries.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

// A file or folder that is not there (a config, a data file, a run's checkpoint): the command line prints
// it as any error; Python raises it as FileNotFoundError.
class FileMissing : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The temporary beside `path` that this process writes before renaming it into place: path.tmp-PID
// (the pid tells remove_stale_temporaries whether its writer is still alive).
std::string temporary_path(const std::string& path);

// Writes `bytes` to `path` atomically (see above). Errors name the file and the system's reason; on an
// error the temporary file is removed and any previous file at `path` is left as it was.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The bytes of the file at `path`. Errors say what the file is for, name it and give the reason:
// "cannot read the checkpoint r/last.ckpt: No such file or directory", "... : is a folder". A file that
// is not there is FileMissing.
std::string read_file(const std::string& path, const std::string& what);

// Puts the finished folder `fresh` in place of the folder `dir` in one step (renameat2's exchange), then
// removes the earlier one; a kill at any moment leaves `dir` whole, old or new, and at worst the earlier
// folder under `fresh`'s name, which remove_stale_temporaries clears. Where the file system cannot
// exchange, two renames, the earlier folder kept as dir.old until the second is done.
void replace_folder(const std::string& fresh, const std::string& dir);

// Removes, in `folder` and the folders under it named in `subfolders`, what writers that are gone left
// behind: files and folders named *.tmp-PID whose process no longer runs, and files of the kinds attnlab
// writes named *.tmp (last.ckpt.tmp: older versions wrote no pid); and puts back a folder of `folder`
// named in `replaced` (folders attnlab replaces with replace_folder) that a two-rename replace left only
// as X.old. Nothing else is touched: a user's notes.tmp or README.old stay.
void remove_stale_temporaries(const std::string& folder, const std::vector<std::string>& subfolders = {},
                              const std::vector<std::string>& replaced = {});

// Creates the folder `path` and its parents (nothing to do when it is a folder already). Errors say what
// the folder is for and why it cannot be made: "cannot create the export folder w: a file has that name".
void create_folders(const std::string& path, const std::string& what);

}  // namespace attnlab
