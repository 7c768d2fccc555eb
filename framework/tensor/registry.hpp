// Registry<Info>: name -> Info for attnlab's extension points (attention kernels, tasks, model kinds),
// filled by one registration line at the bottom of each implementation's file, before main. A
// function-local static per kind (no static-initialisation-order trouble); a duplicate name is an error
// at start-up; looking up an unknown name lists what exists and suggests the nearest. Each kind defines
// its instance() with the word its errors use ("attention kernel").
//
// Also the did-you-mean every error that lists valid names uses.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word` when it is close enough to be a likely typo; empty otherwise.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

template <class Info>
class Registry {
 public:
  // The one registry of this kind (defined beside Info: `template <> Registry<X>& Registry<X>::instance()`).
  static Registry& instance();
  explicit Registry(std::string what) : what_(std::move(what)) {}

  // Adds an entry; a duplicate name is an error (thrown at start-up).
  bool add(Info info) {
    if (contains(info.name)) throw std::logic_error(what_ + " '" + info.name + "' is registered twice");
    entries_.push_back(std::move(info));
    return true;
  }
  bool contains(const std::string& name) const {
    return std::any_of(entries_.begin(), entries_.end(), [&](const Info& e) { return e.name == name; });
  }
  // The entry called `name`, or std::invalid_argument "<what> 'x' is not among [a, b]; did you mean 'y'?".
  const Info& find(const std::string& name) const {
    for (const Info& e : entries_)
      if (e.name == name) return e;
    std::string list;
    for (const std::string& n : names()) list += (list.empty() ? "" : ", ") + n;
    const std::string guess = nearest(name, names());
    throw std::invalid_argument(what_ + " '" + name + "' is not among [" + list + "]" +
                                (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
  }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> out;
    for (const Info& e : entries_) out.push_back(e.name);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string what_;
  std::vector<Info> entries_;
};

}  // namespace attnlab
