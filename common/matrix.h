// A dense N x N matrix stored row-major; row = sender (from), column = receiver (to).
#pragma once

#include <cstddef>
#include <vector>

namespace rankmap {

template <typename T>
class SquareMatrix {
 public:
  SquareMatrix() = default;
  explicit SquareMatrix(size_t n, T fill = T{}) : n_(n), v_(n * n, fill) {}

  size_t size() const { return n_; }
  T& at(size_t from, size_t to) { return v_[from * n_ + to]; }
  const T& at(size_t from, size_t to) const { return v_[from * n_ + to]; }
  bool operator==(const SquareMatrix&) const = default;

 private:
  size_t n_ = 0;
  std::vector<T> v_;
};

}  // namespace rankmap
