// megacpp/io/utf8.hpp: one code point to its UTF-8 bytes (RFC 3629 section 3), shared by the JSON
// reader's \u escapes and the byte-level BPE alphabet (data/bpe_pieces.hpp).
#pragma once

#include <string>

namespace megacpp::io {

/// Appends the UTF-8 encoding of code point `cp` (< 0x110000; the caller has checked it) to `out`.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace megacpp::io
