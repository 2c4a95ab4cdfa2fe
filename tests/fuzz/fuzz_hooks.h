#pragma once
// Hooks a fuzz target may define besides LLVMFuzzerTestOneInput. They are declared weak so the
// standalone driver (standalone_main.cpp) works with targets that define none of them; libFuzzer
// ignores them (its corpus comes from files: write one with `<target>_replay --write-seeds DIR`).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

// Valid inputs to start mutating from.
__attribute__((weak)) std::vector<std::string> sonde_fuzz_seeds();

// A format-aware mutation (e.g. edit a header and fix its length prefix). `r` is a random
// number the mutation may use for its choices, so runs stay reproducible from the driver's seed.
__attribute__((weak)) void sonde_fuzz_mutate(std::string& input, std::uint64_t r);
