// examples/common/cli.hpp: what the three tools share at their command line: exit codes, flag
// checks that run before any work, and a main() wrapper that turns every exception into one line.
//
// Exit codes (docs/trainer.md "Exit codes"): 0 done, 1 a file, directory or resource the run
// needs is bad (a shard, a checkpoint, an unwritable --out, out of memory), 2 the command line
// itself is wrong (unknown flag, a value that is not a number or is out of range, an impossible
// combination), 3 training diverged (a non-finite loss, gradient or parameter), 4 megacpp-generate
// --verify found a difference, 5 --require_improvement and the validation loss did not fall.
// No input ends a tool with an abort or a signal: run_tool catches everything.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/program_options.hpp>

#include "megacpp/core/error.hpp"
#include "megacpp/core/version.hpp"

namespace megacpp::examples {

/// Process exit codes of megacpp-prepare, megacpp-train and megacpp-generate.
enum ExitCode : int {
  kExitOk = 0,              ///< finished
  kExitError = 1,           ///< a file, directory or resource is bad (the message names it)
  kExitUsage = 2,           ///< the command line is wrong (the message names the flag and value)
  kExitDiverged = 3,        ///< a non-finite loss, gradient or parameter stopped training
  kExitVerify = 4,          ///< megacpp-generate --verify: cached and full-forward decoding differ
  kExitNoImprovement = 5,   ///< --require_improvement: the validation loss did not fall
};

/// A command line that is wrong in itself (a flag's value or a combination of flags): exit 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

/// Throws UsageError "tool: --flag <parts>" unless `ok`.
template <class... Parts>
void check_flag(bool ok, const std::string& tool, std::string_view flag, const Parts&... parts) {
  if (!ok) throw UsageError(tool, megacpp::detail::concat("--", flag, " ", parts...));
}

/// `text` as an unsigned 64-bit integer: decimal digits only (no sign, so "-1" never wraps to
/// 2^64 - 1), in range, nothing after the digits.
inline std::uint64_t parse_u64_flag(const std::string& tool, std::string_view flag, const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  check_flag(!text.empty() && text[0] != '-' && text[0] != '+', tool, flag, "must be an unsigned integer, got \"", text,
             "\"");
  check_flag(ec != std::errc::result_out_of_range, tool, flag, "\"", text, "\" is out of range [0, 18446744073709551615]");
  check_flag(ec == std::errc() && ptr == end, tool, flag, "must be an unsigned integer, got \"", text, "\"");
  return value;
}

/// Checks an integer flag's value is in [lo, hi]; `what` says what the value means.
inline void check_range(const std::string& tool, std::string_view flag, std::int64_t value, std::int64_t lo,
                        std::int64_t hi, std::string_view what = "") {
  check_flag(value >= lo && value <= hi, tool, flag, "must be in [", lo, ", ", hi, "]", what.empty() ? "" : " (",
             what, what.empty() ? "" : ")", ", got ", value);
}

/// Checks a floating-point flag's value is finite and in [lo, hi] (`open_lo`: (lo, hi]); a `hi`
/// of the largest double means no upper bound.
inline void check_real(const std::string& tool, std::string_view flag, double value, double lo, double hi,
                       bool open_lo = false) {
  const bool ok = std::isfinite(value) && (open_lo ? value > lo : value >= lo) && value <= hi;
  if (hi == std::numeric_limits<double>::max())
    check_flag(ok, tool, flag, "must be finite and ", open_lo ? "> " : ">= ", lo, ", got ", value);
  else
    check_flag(ok, tool, flag, "must be finite and in ", open_lo ? "(" : "[", lo, ", ", hi, "], got ", value);
}

/// a * b for positive a, b, or a UsageError naming both flags when the product overflows int64.
inline std::int64_t checked_product(const std::string& tool, std::string_view what, std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw UsageError(tool, megacpp::detail::concat(what, " = ", a, " x ", b, " overflows a 64-bit integer"));
  return product;
}

/// Creates `dir` (and its parents) and proves it is writable by creating and removing a probe
/// file, so a run learns at startup, not at its first checkpoint, that it cannot write there.
inline void ensure_writable_directory(const std::string& tool, std::string_view flag, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check(!fs::exists(dir, ec) || fs::is_directory(dir, ec), tool, "--", flag, " ", dir.string(),
        " exists and is not a directory");
  fs::create_directories(dir, ec);
  check(!ec, tool, "--", flag, " ", dir.string(), ": cannot create the directory (", ec.message(), ")");
  const fs::path probe = dir / (".write_probe." + std::to_string(::getpid()));
  {
    std::ofstream out(probe, std::ios::trunc);
    out << "probe\n";
    out.flush();
    check(out.good(), tool, "--", flag, " ", dir.string(), " is not writable (cannot create ", probe.filename().string(), ")");
  }
  fs::remove(probe, ec);
  check(!ec, tool, "--", flag, " ", dir.string(), ": cannot remove the probe file (", ec.message(), ")");
}

/// Parses the command line against `accepted` into `vm`; with --help, prints `shown` (the flags a
/// user should see; `accepted` may add hidden ones) and returns false: the tool then exits 0.
/// Otherwise runs po::notify (which fills the bound variables) and returns true.
/// With --version (when `accepted` has it), prints "<program> <megacpp version>" and returns false too.
inline bool parse_flags_or_help(int argc, char** argv, const boost::program_options::options_description& accepted,
                                const boost::program_options::options_description& shown,
                                boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  // No positional arguments: a stray word ("--no_fim_mask 1") is an error, not silently dropped.
  const po::positional_options_description none;
  po::store(po::command_line_parser(argc, argv).options(accepted).positional(none).run(), vm);
  if (vm.count("help")) {
    std::ostringstream help;
    help << shown;
    std::printf("%s\n", help.str().c_str());
    return false;
  }
  if (vm.count("version")) {
    const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "megacpp";
    std::printf("%s %s\n", program.c_str(), kVersion);
    return false;
  }
  po::notify(vm);
  return true;
}

/// --special_tokens' default (the tools that take a BPE tokenizer.json): StarCoder's names, one
/// <|endoftext|> that begins and ends documents, then the three FIM sentinels.
inline constexpr const char* kDefaultSpecialTokens = "<|endoftext|>,<|endoftext|>,<fim_prefix>,<fim_suffix>,<fim_middle>";

/// A default value as --help shows it: the shortest text that reads back as `value` ("0.004",
/// not program_options' 17 digits "0.0040000000000000001").
inline std::string shown_default(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

namespace detail {
// Messages are one line: a newline inside an exception's text (nlohmann, boost) becomes "; ".
inline std::string one_line(std::string s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n') out += s[i];
    else if (i + 1 < s.size()) out += "; ";
  }
  return out;
}
inline void report(const std::string& tool, const std::string& text) {
  std::fflush(stdout);
  const std::string line = one_line(text.rfind(tool + ":", 0) == 0 ? text : tool + ": " + text);
  std::fprintf(stderr, "%s\n", line.c_str());
}
}  // namespace detail

/// Runs a tool's body and returns its exit code; any exception becomes one line on stderr
/// ("tool: what failed, naming the flag or file") and the exit code of its class. `body` returns
/// the exit code of a normal end.
template <class Body>
int run_tool(const std::string& tool, Body&& body) noexcept {
  try {
    return body();
  } catch (const UsageError& e) {
    detail::report(tool, std::string(e.what()) + " (see --help)");
    return kExitUsage;
  } catch (const boost::program_options::error& e) {
    detail::report(tool, std::string(e.what()) + " (see --help)");
    return kExitUsage;
  } catch (const Error& e) {
    detail::report(tool, e.what());
    return kExitError;
  } catch (const std::filesystem::filesystem_error& e) {
    detail::report(tool, e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    detail::report(tool, "out of memory (std::bad_alloc): the run asked for more memory than the machine has");
    return kExitError;
  } catch (const std::exception& e) {
    detail::report(tool, e.what());
    return kExitError;
  } catch (...) {
    detail::report(tool, "unknown exception");
    return kExitError;
  }
}

}  // namespace megacpp::examples
