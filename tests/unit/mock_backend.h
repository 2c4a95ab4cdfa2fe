#pragma once
// A GoogleMock double of sonde::Backend, for tests of the executor in isolation: they see exactly
// which nodes are run where (the real backends are tested in backend_ops and the model tests).
#include <sonde/executor.h>

#include <gmock/gmock.h>

namespace sonde::test {

class MockBackend : public Backend {
 public:
  MOCK_METHOD(void, init, (const BackendOptions&), (override));
  MOCK_METHOD(BackendInfo, info, (), (const, override));
  MOCK_METHOD(bool, supports, (const Node&, std::span<const DType>), (const, override));
  MOCK_METHOD(TensorView, upload, (const std::string&, const TensorView&, Split), (override));
  MOCK_METHOD(TensorView, weight, (const std::string&), (const, override));
  MOCK_METHOD(void, run, (const Node&, std::span<const TensorView>, const TensorView&), (override));
  MOCK_METHOD(void, run_siblings,
              (std::span<const Node* const>, std::span<const std::vector<TensorView>>, std::span<const TensorView>),
              (override));
};

}  // namespace sonde::test
