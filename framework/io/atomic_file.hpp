// Whole files. Writing is atomic, so that a kill or a crash never leaves a half-written file in place: the
// bytes go to a temporary file beside the target (path + ".tmp"), which is flushed, synced and then renamed
// over the target. Readers see either the old file or the new one, never a mix.
#pragma once

#include <string>

namespace attnlab {

// Writes `bytes` to `path` atomically (see above). Errors name the file and the system's reason; on an
// error the temporary file is removed and any previous file at `path` is left as it was.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The bytes of the file at `path`. Errors say what the file is for, name it and give the reason:
// "cannot read the checkpoint r/last.ckpt: No such file or directory", "... : is a folder".
std::string read_file(const std::string& path, const std::string& what);

// Creates the folder `path` and its parents (nothing to do when it is a folder already). Errors say what
// the folder is for and why it cannot be made: "cannot create the export folder w: a file has that name".
void create_folders(const std::string& path, const std::string& what);

}  // namespace attnlab
