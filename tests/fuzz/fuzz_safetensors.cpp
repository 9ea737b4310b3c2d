// libFuzzer harness: the safetensors reader (megacpp/io/safetensors.hpp), on a file holding the
// input. Every tensor of an accepted file is read with its own dtype, and the file written back by
// SafetensorsWriter must read again to the same names, metadata, dtypes, shapes and bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/io/safetensors.hpp"

namespace {

using megacpp::Cpu;
using megacpp::io::SafetensorsReader;
using megacpp::io::SafetensorsWriter;

// Calls f(T{}) with the element type that `dtype` names; false for the dtypes the reader lists
// but megacpp has no tensor type for (I64, U16, F8_E4M3, ...).
template <class F>
bool with_element_type(const std::string& dtype, F f) {
  using megacpp::dtype_name;
  if (dtype == dtype_name<float>()) f(float{});
  else if (dtype == dtype_name<double>()) f(double{});
  else if (dtype == dtype_name<megacpp::bf16>()) f(megacpp::bf16{});
  else if (dtype == dtype_name<megacpp::f16>()) f(megacpp::f16{});
  else if (dtype == dtype_name<std::int32_t>()) f(std::int32_t{});
  else if (dtype == dtype_name<std::uint8_t>()) f(std::uint8_t{});
  else return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static megacpp::fuzz::InputFile input(".safetensors"), copy_file(".copy.safetensors");
  using megacpp::fuzz::require;
  try {
    const SafetensorsReader file(input.write(data, size));
    SafetensorsWriter copy;
    std::vector<std::string> copied;
    for (const auto& name : file.names()) {
      const bool known = with_element_type(file.entry(name).dtype, [&]<class T>(T) {
        copy.add(name, file.read<T, Cpu>(name));
      });
      if (known) copied.push_back(name);
    }
    for (const auto& [key, value] : file.metadata()) copy.set_metadata(key, value);
    copy.write(copy_file.path());

    const SafetensorsReader again(copy_file.path());
    require(again.names().size() == copied.size(), "the copy has a different number of tensors");
    require(again.metadata() == file.metadata(), "the copy has different metadata");
    for (const auto& name : copied) {
      require(again.entry(name).dtype == file.entry(name).dtype && again.entry(name).shape == file.entry(name).shape,
              "a tensor's dtype or shape changes in the copy");
      with_element_type(file.entry(name).dtype, [&]<class T>(T) {
        const std::vector<T> x = file.read<T, Cpu>(name).to_host(), y = again.read<T, Cpu>(name).to_host();
        require(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0),
                "a tensor's bytes change in a read/write/read round trip");
      });
    }
  } catch (const megacpp::Error&) {
    // rejected with a message: the expected outcome for most inputs
  }
  return 0;
}
