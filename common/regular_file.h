// Input files must be regular files, checked before they are opened: opening a FIFO for reading
// blocks until some writer appears (a hang, not an error), and a directory or a device is never
// what a user meant. Header-only so every layer can use it.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace tandem {

// Throws UserError "<path>: <what>does not exist | is a directory | is not a regular file (a FIFO,
// a device or a socket)" unless `path` names a regular file (after symlinks). `what` names the
// role for the message, e.g. "the recipe file " (with its trailing space) or "".
inline void require_regular_file(const std::string& path, const std::string& what = "") {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UserError(path + ": " + what +
                    (errno == ENOENT ? "does not exist" : "cannot be read: " + std::string(std::strerror(errno))));
  if (S_ISDIR(st.st_mode)) throw UserError(path + ": " + what + "is a directory, expected a file");
  if (!S_ISREG(st.st_mode))
    throw UserError(path + ": " + what + "is not a regular file (a FIFO, a device or a socket); give a file");
}

}  // namespace tandem
