# The byte-level BPE tokenizer (megacpp/data/bpe_tokenizer.hpp) is an optional component of the
# headers: it reads tokenizer.json with nlohmann_json and runs the file's pre_tokenizer regexes
# with PCRE2 (megacpp/data/pre_tokenizer.hpp). megacpp_link_bpe_tokenizer(<target>) gives a
# target of this build both; a consumer does the same with its own find_package/pkg-config.
# Debian: nlohmann-json3-dev, libpcre2-dev (scripts/install-deps.sh).
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(MEGACPP_PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)

function(megacpp_link_bpe_tokenizer target)
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json PkgConfig::MEGACPP_PCRE2)
endfunction()
