// megacpp/io/mapped_file.hpp: a read-only memory map of a whole file (RAII).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "megacpp/core/error.hpp"

namespace megacpp::io {

/// The bytes of a file, mapped read-only; pages are read on first touch.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path`; `op` names the caller in error messages.
  explicit MappedFile(const std::filesystem::path& path, const std::string& op = "MappedFile") : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check(fd >= 0, op, "cannot open ", path.string(), ": ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      fail(op, "cannot stat ", path.string(), ": ", why);
    }
    if (!S_ISREG(st.st_mode)) {  // a directory opens, then fails to map with a less helpful message
      ::close(fd);
      fail(op, path.string(), " is not a regular file", S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        fail(op, "cannot map ", path.string(), ": ", why);
      }
      data_ = static_cast<const char*>(p);
    }
    ::close(fd);  // the mapping stays valid
  }
  /// Takes over the mapping of `o`, which is left empty.
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  /// Unmaps this file's bytes and takes over the mapping of `o`, which is left empty.
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { unmap(); }

  /// The whole file's bytes (empty for an empty or default-constructed file).
  std::span<const char> bytes() const { return {data_, size_}; }
  /// Size of the file in bytes.
  std::size_t size() const { return size_; }
  /// The mapped file's path.
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
    data_ = nullptr;
  }
  const char* data_ = nullptr;
  std::size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace megacpp::io
