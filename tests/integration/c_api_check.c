/* Compiled as C: the public header must be valid C. Stores and reads back one value through the C API. */
#include <errno.h>
#include <string.h>

#include "rfos/rfos.h"

int rfos_c_roundtrip(rfos_cont_t* cont) {
  rfos_oid_t oid = {2ull << 56, 42};
  char back[16];
  size_t len = 0;
  int rc = rfos_put_value(cont, oid, "from-c", "v", "hello from C", 12);
  if (rc != 0) return rc;
  rc = rfos_get_value(cont, oid, "from-c", "v", back, sizeof(back), &len);
  if (rc != 0) return rc;
  return (len == 12 && memcmp(back, "hello from C", 12) == 0) ? 0 : -EIO;
}
