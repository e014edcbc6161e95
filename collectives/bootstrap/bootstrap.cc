#include "collectives/bootstrap/bootstrap.h"

#include "common/error.h"

namespace rankmap::coll::bootstrap {

Bootstrap::Bootstrap(int rank, int size) : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    RANKMAP_THROW(InvalidInput, "bootstrap: rank {} is not in a group of {} ranks", rank, size);
  }
}

}  // namespace rankmap::coll::bootstrap
