// The headers without OpenMP: no_openmp_step (compiled without -fopenmp) computes three training
// steps of the tiny model bit for bit as this OpenMP build does on one thread.
#include <catch2/catch.hpp>

#include <omp.h>

#include "data/temp_dir.hpp"
#include "no_openmp/training_steps.hpp"
#include "train/process.hpp"

TEST_CASE("no OpenMP: the headers compile and a serial build equals the OpenMP build on one thread", "[openmp]") {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::string with_openmp = megacpp::testing::three_training_steps();
  omp_set_num_threads(threads);
  megacpp::testing::TempDir dir;
  const auto serial = megacpp::testing::run_process(MEGACPP_NO_OPENMP_STEP, {}, dir / "serial.log");
  INFO(serial.output);
  REQUIRE(serial.exit_code == 0);
  CHECK(serial.output == with_openmp);
  CHECK(with_openmp.find("loss") != std::string::npos);
}
