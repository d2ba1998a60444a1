/* broken_plugin: one source compiled into several plugins that are wrong in one way each, to
 * test that the loader refuses them with a message naming the file and the reason:
 *   BROKEN_WRONG_ABI      descriptor built for ABI version WALRELAY_TRANSFORM_ABI_VERSION + 1
 *   BROKEN_SHORT          descriptor smaller than version 1's
 *   BROKEN_NO_APPLY       descriptor without an apply callback
 *   BROKEN_REFUSES_HOST   entry function returns NULL
 *   BROKEN_NO_ENTRY       no walrelay_transform_entry symbol at all */
#include <walrelay/transform.h>

#include <stddef.h>

static walrelay_status broken_create(const walrelay_create_args *args, void **instance, char *error,
                                     size_t error_size) {
  (void)args;
  (void)error;
  (void)error_size;
  *instance = NULL;
  return WALRELAY_OK;
}

static walrelay_status broken_apply(void *instance, const walrelay_record *in, walrelay_record *out,
                                    char *error, size_t error_size) {
  (void)instance;
  (void)in;
  (void)out;
  (void)error;
  (void)error_size;
  return WALRELAY_OK;
}

static void broken_destroy(void *instance) { (void)instance; }

#if defined(BROKEN_SHORT)
#define BROKEN_SIZE 8u
#else
#define BROKEN_SIZE sizeof(walrelay_transform_plugin)
#endif

#if defined(BROKEN_WRONG_ABI)
#define BROKEN_ABI (WALRELAY_TRANSFORM_ABI_VERSION + 1u)
#else
#define BROKEN_ABI WALRELAY_TRANSFORM_ABI_VERSION
#endif

#if defined(BROKEN_NO_APPLY)
#define BROKEN_APPLY NULL
#else
#define BROKEN_APPLY broken_apply
#endif

static const walrelay_transform_plugin kBrokenPlugin = {
    BROKEN_SIZE, BROKEN_ABI, "broken", "0", broken_create, BROKEN_APPLY, broken_destroy};

#if defined(BROKEN_NO_ENTRY)
/* Exported under a name the host does not look for. */
WALRELAY_TRANSFORM_EXPORT const walrelay_transform_plugin *walrelay_transform_entry_v0(void);
const walrelay_transform_plugin *walrelay_transform_entry_v0(void) {
  (void)broken_apply;
  return &kBrokenPlugin;
}
#else
const walrelay_transform_plugin *walrelay_transform_entry(uint32_t host_abi_version) {
  (void)host_abi_version;
  (void)broken_apply;
#if defined(BROKEN_REFUSES_HOST)
  (void)kBrokenPlugin;
  return NULL;
#else
  return &kBrokenPlugin;
#endif
}
#endif
