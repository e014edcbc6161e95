/* Compiles the public C API header as C (the tests are C++): every declaration must be valid C. */
#include "rankmap/coll.h"

int rankmapCHeaderCheck(void);

int rankmapCHeaderCheck(void) {
  rankmapComm_t comm = NULL;
  rankmapResult_t (*allreduce)(const void*, void*, size_t, rankmapDataType_t, rankmapRedOp_t,
                               rankmapComm_t) = rankmapAllReduce;
  (void)comm;
  (void)allreduce;
  return (int)rankmapPeerError + (int)rankmapBfloat16 + (int)rankmapAvg;
}
