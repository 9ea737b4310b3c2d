// megacpp/io/safetensors.hpp: read and write the safetensors format (weights, optimizer state).
//
// Format (huggingface/safetensors, docs "Format"): an 8-byte little-endian u64 N, an N-byte
// UTF-8 JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the data buffer; offsets are relative to its start and
// tensors are row-major little-endian. Every field is validated on read: a truncated or corrupt
// file is an error naming the file, the tensor and the values, never a silent misread. As the
// reference implementation does (huggingface/safetensors, `Metadata::validate`), the tensors
// must tile the data buffer exactly: sorted by offsets they start at 0, each begins where the
// previous ends (no overlap, no hole), and the last ends at the end of the file. Every byte
// count is computed with overflow checks, so a shape like [2^61] of F64 is refused by name
// rather than wrapping to a small size.
// Writes are atomic (io/atomic_file.hpp), so a crash mid-save leaves the previous file intact.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/core/tensor.hpp"
#include "megacpp/io/atomic_file.hpp"
#include "megacpp/io/json_value.hpp"
#include "megacpp/io/mapped_file.hpp"

namespace megacpp::io {

static_assert(std::endian::native == std::endian::little,
              "megacpp_safetensors_needs_little_endian: safetensors data is little-endian and is copied as is");

/// Where one tensor lives in a safetensors file.
struct SafetensorsEntry {
  std::string dtype;          ///< "F32", "F64", "BF16", "F16", "I32", "U8", ...
  Shape shape;                ///< dimensions, row-major
  std::uint64_t begin = 0;    ///< byte offsets into the data buffer
  std::uint64_t end = 0;      ///< one past the last byte in the data buffer
};

namespace detail {
inline std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}
}  // namespace detail

/// A safetensors file opened for reading (memory-mapped).
class SafetensorsReader {
 public:
  /// The largest JSON header accepted, in bytes (the reference implementation's limit).
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

  /// Opens and validates `path`: header size, JSON, dtypes, shapes, offsets within the file.
  explicit SafetensorsReader(const std::filesystem::path& path) : file_(path, "safetensors") {
    const std::string where = path.string();
    const auto bytes = file_.bytes();
    check(bytes.size() >= 8, "safetensors", where, ": file of ", bytes.size(), " bytes is too short for a header");
    std::uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
    check(header_size <= bytes.size() - 8, "safetensors", where, ": header size ", header_size,
          " exceeds the file (", bytes.size(), " bytes): truncated or not a safetensors file");
    // The reference reader's cap (huggingface/safetensors, MAX_HEADER_SIZE): a header of
    // hundreds of megabytes is a hostile or corrupt file, not a checkpoint's index of tensors.
    check(header_size <= kMaxHeaderBytes, "safetensors", where, ": header size ", header_size, " exceeds the limit of ",
          kMaxHeaderBytes, " bytes: not a safetensors file");
    data_ = bytes.data() + 8 + header_size;
    data_size_ = bytes.size() - 8 - header_size;
    const JsonValue header = parse_json(std::string_view(bytes.data() + 8, header_size), "safetensors " + where);
    check(header.kind == JsonValue::Kind::object, "safetensors", where, ": header is not a JSON object");
    for (const auto& [name, value] : header.object) {
      if (name == "__metadata__") {
        check(value.kind == JsonValue::Kind::object, "safetensors", where, ": __metadata__ is not an object");
        for (const auto& [k, v] : value.object) {
          check(v.kind == JsonValue::Kind::string, "safetensors", where, ": metadata \"", k, "\" is not a string");
          metadata_[k] = v.string;
        }
        continue;
      }
      entries_.emplace(name, parse_entry(where, name, value));
      order_.push_back(name);
    }
    check_tiling(where);
  }

  /// Tensor names in the header.
  const std::vector<std::string>& names() const { return order_; }
  /// True when the file holds a tensor named `name`.
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  /// The entry for `name`; throws naming the file when absent.
  const SafetensorsEntry& entry(const std::string& name) const {
    const auto it = entries_.find(name);
    check(it != entries_.end(), "safetensors", file_.path().string(), ": no tensor named \"", name, "\"");
    return it->second;
  }
  /// The string key-value pairs of the header's "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// Copies tensor `name` to backend B; its dtype must be T's and, when given, its shape `expected`.
  template <class T, Backend B>
  Tensor<T, B> read(const std::string& name, const Shape* expected = nullptr) const {
    const SafetensorsEntry& e = entry(name);
    check(e.dtype == dtype_name<T>(), "safetensors", file_.path().string(), ": tensor \"", name, "\" has dtype ",
          e.dtype, ", expected ", dtype_name<T>());
    if (expected)
      check(e.shape == *expected, "safetensors", file_.path().string(), ": tensor \"", name, "\" has shape ", e.shape,
            ", expected ", *expected);
    // The header check bounded the element count by the file's size, so this allocation is too.
    std::vector<T> host(static_cast<std::size_t>(e.shape.numel()));
    if (!host.empty()) std::memcpy(host.data(), data_ + e.begin, host.size() * sizeof(T));
    return Tensor<T, B>::from_host(e.shape, host);
  }

  /// Tensor `name` as element type T (float or double), converting a floating-point file dtype
  /// (F64, F32, BF16, F16) by value: widening (BF16/F16 -> F32, F32 -> F64) is exact, narrowing
  /// rounds to nearest as PyTorch's copy_ does (a bf16 export of a model loads into fp32 weights).
  /// Any other dtype, or a shape other than `expected`, is an error naming both.
  template <class T, Backend B>
  Tensor<T, B> read_as(const std::string& name, const Shape* expected = nullptr) const {
    static_assert(std::is_floating_point_v<T>, "megacpp_safetensors_read_as: read_as converts to float or double only");
    const SafetensorsEntry& e = entry(name);
    if (e.dtype == dtype_name<T>()) return read<T, B>(name, expected);
    if (expected)
      check(e.shape == *expected, "safetensors", file_.path().string(), ": tensor \"", name, "\" has shape ", e.shape,
            ", expected ", *expected);
    std::vector<T> host(static_cast<std::size_t>(e.shape.numel()));
    const char* src = data_ + e.begin;
    auto convert = [&](auto tag) {
      using S = decltype(tag);
      for (std::size_t i = 0; i < host.size(); ++i) {
        S v;
        std::memcpy(&v, src + i * sizeof(S), sizeof(S));
        host[i] = static_cast<T>(static_cast<double>(static_cast<std::conditional_t<std::is_floating_point_v<S>, S, float>>(v)));
      }
    };
    if (e.dtype == "F64") convert(double{});
    else if (e.dtype == "F32") convert(float{});
    else if (e.dtype == "BF16") convert(bf16{});
    else if (e.dtype == "F16") convert(f16{});
    else
      fail("safetensors", file_.path().string(), ": tensor \"", name, "\" has dtype ", e.dtype, ", which does not convert to ",
           dtype_name<T>(), " (floating-point dtypes F64, F32, BF16 and F16 do)");
    return Tensor<T, B>::from_host(e.shape, host);
  }

 private:
  SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const JsonValue& v) const {
    const std::string ctx = "safetensors " + where + " tensor \"" + name + "\"";
    SafetensorsEntry e;
    const JsonValue& dtype = v.at("dtype", ctx);
    check(dtype.kind == JsonValue::Kind::string, ctx, "dtype is not a string");
    e.dtype = dtype.string;
    const std::size_t width = detail::dtype_size(e.dtype);
    check(width > 0, ctx, "unknown dtype \"", e.dtype, "\"");
    const JsonValue& shape = v.at("shape", ctx);
    check(shape.kind == JsonValue::Kind::array && shape.array.size() <= static_cast<std::size_t>(Shape::kMaxRank), ctx,
          "shape must be an array of at most ", Shape::kMaxRank, " dims");
    // bytes = product of the dims x width, each step overflow-checked in 64 bits.
    std::uint64_t bytes = width;
    bool overflow = false;
    for (const auto& d : shape.array) {
      check(d.kind == JsonValue::Kind::integer && d.integer >= 0, ctx, "shape has a non-integer or negative dim");
      e.shape.push_back(d.integer);
      overflow = overflow || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d.integer), &bytes);
    }
    // Refused even when another dim is 0: Shape::numel refuses such extents too (core/shape.hpp).
    check(!overflow, ctx, "shape ", shape_text(shape), " of ", e.dtype, " (", width,
          " bytes each) needs more than 2^64 bytes: corrupt header");
    const JsonValue& offsets = v.at("data_offsets", ctx);
    check(offsets.kind == JsonValue::Kind::array && offsets.array.size() == 2 &&
              offsets.array[0].kind == JsonValue::Kind::integer && offsets.array[1].kind == JsonValue::Kind::integer,
          ctx, "data_offsets must be [begin, end], two integers");
    check(offsets.array[0].integer >= 0 && offsets.array[0].integer <= offsets.array[1].integer, ctx,
          "data_offsets [", offsets.array[0].integer, ", ", offsets.array[1].integer, "] are not ordered");
    e.begin = static_cast<std::uint64_t>(offsets.array[0].integer);
    e.end = static_cast<std::uint64_t>(offsets.array[1].integer);
    check(e.end <= data_size_, ctx, "data_offsets end ", e.end, " exceeds the data buffer of ", data_size_,
          " bytes: the file is truncated");
    check(e.end - e.begin == bytes, ctx, "holds ", e.end - e.begin, " bytes but shape ", e.shape, " of ", e.dtype,
          " needs ", bytes);
    return e;
  }

  // "[2305843009213693952, 4]": the dims as the header wrote them (a Shape may refuse them).
  static std::string shape_text(const JsonValue& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.array.size(); ++i) s.append(i ? ", " : "").append(std::to_string(shape.array[i].integer));
    return s + "]";
  }

  // The tensors, sorted by (begin, end), must cover [0, data_size_) exactly once.
  void check_tiling(const std::string& where) const {
    std::vector<const std::pair<const std::string, SafetensorsEntry>*> sorted;
    for (const auto& item : entries_) sorted.push_back(&item);
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
      return std::pair(a->second.begin, a->second.end) < std::pair(b->second.begin, b->second.end);
    });
    std::uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
    const std::pair<const std::string, SafetensorsEntry>* previous = nullptr;
    for (const auto* item : sorted) {
      const auto& [name, e] = *item;
      check(e.begin <= covered, "safetensors", where, ": bytes [", covered, ", ", e.begin, ") of the data buffer belong to no tensor (a hole before tensor \"",
            name, "\" at [", e.begin, ", ", e.end, ")): corrupt header");
      if (e.begin < covered)
        fail("safetensors", where, ": tensor \"", name, "\" at [", e.begin, ", ", e.end, ") overlaps tensor \"",
             previous->first, "\" at [", previous->second.begin, ", ", previous->second.end,
             "): tensors must not share bytes");
      covered = e.end;
      previous = item;
    }
    check(covered == data_size_, "safetensors", where, ": the tensors cover ", covered, " bytes but the data buffer has ",
          data_size_, ": ", data_size_ - covered, " trailing bytes belong to no tensor");
  }

  MappedFile file_;
  const char* data_ = nullptr;
  std::uint64_t data_size_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> metadata_;
};

/// Collects tensors and metadata, then writes one safetensors file atomically.
class SafetensorsWriter {
 public:
  /// Adds a copy of `t` (any backend; copied to the host now) under a unique `name`.
  template <class T, Backend B>
  void add(const std::string& name, const Tensor<T, B>& t) {
    check(!name.empty() && name != "__metadata__", "safetensors", "invalid tensor name \"", name, "\"");
    for (const auto& e : entries_) check(e.name != name, "safetensors", "duplicate tensor name \"", name, "\"");
    const std::vector<T> host = t.to_host();
    Pending p{name, std::string(dtype_name<T>()), t.shape(), {}};
    p.bytes.resize(host.size() * sizeof(T));
    if (!host.empty()) std::memcpy(p.bytes.data(), host.data(), p.bytes.size());
    entries_.push_back(std::move(p));
  }
  /// Free-form string metadata ("__metadata__").
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  /// Writes header and data to `path` (temp + fsync + rename).
  void write(const std::filesystem::path& path) const {
    std::string header = "{";
    std::uint64_t offset = 0;
    bool first = true;
    if (!metadata_.empty()) {
      header += json_quote("__metadata__") + ":{";
      bool first_meta = true;
      for (const auto& [k, v] : metadata_) {
        if (!first_meta) header += ',';
        header.append(json_quote(k)).append(":").append(json_quote(v));
        first_meta = false;
      }
      header += "}";
      first = false;
    }
    for (const auto& e : entries_) {
      // append() rather than operator+ chains: GCC 12 reports a false -Wrestrict on
      // `const char* + std::string` once this is inlined at -O3.
      if (!first) header += ',';
      header.append(json_quote(e.name)).append(":{\"dtype\":").append(json_quote(e.dtype)).append(",\"shape\":[");
      for (int d = 0; d < e.shape.rank(); ++d) {
        if (d) header += ',';
        header.append(std::to_string(e.shape[d]));
      }
      header.append("],\"data_offsets\":[").append(std::to_string(offset)).append(",");
      header.append(std::to_string(offset + e.bytes.size())).append("]}");
      offset += e.bytes.size();
      first = false;
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');  // data buffer starts 8-byte aligned
    char size_bytes[8];
    std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i, n >>= 8) size_bytes[i] = static_cast<char>(n & 0xFF);
    std::vector<std::span<const char>> chunks{std::span<const char>(size_bytes, 8), std::span<const char>(header)};
    for (const auto& e : entries_) chunks.emplace_back(e.bytes);
    atomic_write(path, std::span<const std::span<const char>>(chunks));
  }

 private:
  struct Pending {
    std::string name, dtype;
    Shape shape;
    std::vector<char> bytes;
  };
  std::vector<Pending> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace megacpp::io
