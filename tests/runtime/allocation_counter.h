// Counts heap allocations (every form of global operator new) made by the
// calling thread while a CountAllocations scope is alive. Linking this library
// replaces the global operator new/delete of the whole test binary, so give
// it a test binary of its own.
//
//   CountAllocations count;
//   model({x});
//   EXPECT_LE(count.allocations(), 2);
#pragma once

#include <cstdint>

namespace grove::testing {

class CountAllocations {
 public:
  CountAllocations();
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;

  // operator new calls on this thread since the scope began.
  int64_t allocations() const;

 private:
  int64_t start_;
  bool was_counting_;
};

}  // namespace grove::testing
