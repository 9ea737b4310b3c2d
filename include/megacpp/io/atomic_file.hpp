// megacpp/io/atomic_file.hpp: crash-safe file replacement (temp file + fsync + rename).
//
// A reader sees either the old file or the complete new one, never a torn write: the data goes
// to "<path>.tmp.<pid>", is fsync'ed, renamed over <path> (atomic on POSIX), and the directory
// is fsync'ed so the rename itself survives a power loss. A process killed mid-write leaves at
// most a stray temp file; the previous file stays valid.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>

#include "megacpp/core/error.hpp"

namespace megacpp::io {

namespace detail {
inline std::string errno_text() { return std::strerror(errno); }

inline void write_all(int fd, const char* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      fail("atomic_write", "write to ", path, " failed: ", why);
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some filesystems refuse to open directories; the rename still happened
  ::fsync(fd);
  ::close(fd);
}
}  // namespace detail

/// Writes `chunks` (in order) to `path` atomically: temp file, fsync, rename, fsync of the directory.
inline void atomic_write(const std::filesystem::path& path, std::span<const std::span<const char>> chunks) {
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, "atomic_write", "cannot create ", tmp, ": ", detail::errno_text());
  for (const auto& chunk : chunks) detail::write_all(fd, chunk.data(), chunk.size(), tmp);
  if (::fsync(fd) != 0) {
    const std::string why = detail::errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("atomic_write", "fsync of ", tmp, " failed: ", why);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = detail::errno_text();
    ::unlink(tmp.c_str());
    fail("atomic_write", "rename ", tmp, " -> ", path.string(), " failed: ", why);
  }
  detail::fsync_directory(path.parent_path());
}

/// Writes one buffer to `path` atomically.
inline void atomic_write(const std::filesystem::path& path, std::span<const char> bytes) {
  const std::span<const char> chunks[] = {bytes};
  atomic_write(path, std::span<const std::span<const char>>(chunks));
}

}  // namespace megacpp::io
