/* Compiled as C: the public header must be valid C. Stores and reads back one value through the C API. */
#include <errno.h>
#include <string.h>

#include "rfos/rfos.h"
#include "rfos/rfos_fs.h"

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

/* Two small files in one call and back in another, through the namespace's C API. */
int rfos_c_files(rfos_fs_t* fs, const char* dir) {
  rfos_fs_put_t put[2] = {{"a", 0644, "alpha", 5, 1}, {"b", 0600, "", 0, 1}};
  char a[8], b[8];
  rfos_fs_get_t get[2] = {{"a", a, sizeof(a), 0, 1}, {"b", b, sizeof(b), 0, 1}};
  int rc = rfos_fs_put_files(fs, dir, put, 2, 0);
  if (rc != 2) return rc < 0 ? rc : -EIO;
  rc = rfos_fs_get_files(fs, dir, get, 2, 0);
  if (rc != 2) return rc < 0 ? rc : -EIO;
  return get[0].len == 5 && memcmp(a, "alpha", 5) == 0 && get[1].len == 0 && put[0].status == 0 ? 0 : -EIO;
}
