/* filter: drops records by the value of one header (README.md lists the keys).
 *
 * A record matches when a header named `header` has one of the comma-separated `values`
 * (compared byte for byte; a null header value matches nothing). Matching records are dropped,
 * or, with `negate=true`, only matching records are kept.
 *
 * Written in plain C11 against include/walrelay/transform.h alone, as the reference for
 * plugins that are not C++. */
#include <walrelay/transform.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct filter_value {
  char *data;
  size_t size;
} filter_value;

typedef struct filter {
  filter_value header;
  filter_value *values;
  size_t value_count;
  int negate;
} filter;

static void filter_destroy(void *instance) {
  filter *f = (filter *)instance;
  size_t i;
  if (f == NULL) return;
  for (i = 0; i < f->value_count; ++i) free(f->values[i].data);
  free(f->values);
  free(f->header.data);
  free(f);
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Copies [begin, end) without surrounding blanks; 0 when out of memory. */
static int copy_trimmed(const char *begin, const char *end, filter_value *out) {
  while (begin < end && is_blank(*begin)) ++begin;
  while (end > begin && is_blank(end[-1])) --end;
  out->size = (size_t)(end - begin);
  out->data = (char *)malloc(out->size + 1);
  if (out->data == NULL) return 0;
  memcpy(out->data, begin, out->size);
  out->data[out->size] = '\0';
  return 1;
}

/* Splits the comma-separated list into f->values, skipping empty entries. */
static int parse_values(filter *f, const char *list, char *error, size_t error_size) {
  const char *p = list;
  size_t commas = 0;
  for (; *p != '\0'; ++p) commas += *p == ',';
  f->values = (filter_value *)calloc(commas + 1, sizeof(filter_value));
  if (f->values == NULL) goto out_of_memory;
  for (p = list;;) {
    const char *comma = strchr(p, ',');
    const char *end = comma != NULL ? comma : p + strlen(p);
    filter_value *v = &f->values[f->value_count];
    if (!copy_trimmed(p, end, v)) goto out_of_memory;
    if (v->size > 0) {
      ++f->value_count;
    } else {
      free(v->data);
      v->data = NULL;
    }
    if (comma == NULL) break;
    p = comma + 1;
  }
  if (f->value_count == 0) {
    snprintf(error, error_size, "'values' lists no value");
    return 0;
  }
  return 1;
out_of_memory:
  snprintf(error, error_size, "out of memory");
  return 0;
}

/* Kafka Connect booleans: true/false in any case. -1 when neither. */
static int parse_bool(const char *s) {
  static const char *const words[2] = {"false", "true"};
  int w;
  for (w = 0; w < 2; ++w) {
    size_t i = 0;
    while (s[i] != '\0' && words[w][i] != '\0' && (s[i] | 0x20) == words[w][i]) ++i;
    if (s[i] == '\0' && words[w][i] == '\0') return w;
  }
  return -1;
}

static walrelay_status filter_create(const walrelay_create_args *args, void **instance, char *error,
                                     size_t error_size) {
  const char *header = NULL;
  const char *values = NULL;
  char message[160];
  size_t i;
  filter *f = (filter *)calloc(1, sizeof(filter));
  if (f == NULL) {
    snprintf(error, error_size, "out of memory");
    return WALRELAY_ERROR;
  }
  for (i = 0; i < args->config_count; ++i) {
    const char *key = args->config[i].key;
    const char *value = args->config[i].value;
    if (strcmp(key, "header") == 0) {
      header = value;
    } else if (strcmp(key, "values") == 0) {
      values = value;
    } else if (strcmp(key, "negate") == 0) {
      f->negate = parse_bool(value);
      if (f->negate < 0) {
        snprintf(error, error_size, "'negate' must be true or false, got '%s'", value);
        goto fail;
      }
    } else {
      snprintf(error, error_size, "unknown key '%s' (known: header, values, negate)", key);
      goto fail;
    }
  }
  if (header == NULL || values == NULL) {
    snprintf(error, error_size, "missing required key '%s'", header == NULL ? "header" : "values");
    goto fail;
  }
  if (!copy_trimmed(header, header + strlen(header), &f->header)) {
    snprintf(error, error_size, "out of memory");
    goto fail;
  }
  if (f->header.size == 0) {
    snprintf(error, error_size, "'header' must name a header");
    goto fail;
  }
  if (!parse_values(f, values, error, error_size)) goto fail;
  snprintf(message, sizeof message, "%s records whose '%s' header has one of %u value(s)",
           f->negate ? "keeping only" : "dropping", f->header.data, (unsigned)f->value_count);
  args->host_api->log(args->host, WALRELAY_LOG_INFO, message);
  *instance = f;
  return WALRELAY_OK;
fail:
  filter_destroy(f);
  return WALRELAY_ERROR;
}

static int bytes_equal(walrelay_bytes b, const filter_value *v) {
  return b.data != NULL && b.size == v->size && memcmp(b.data, v->data, v->size) == 0;
}

static int filter_matches(const filter *f, const walrelay_record *in) {
  size_t h, v;
  for (h = 0; h < in->header_count; ++h) {
    if (!bytes_equal(in->headers[h].key, &f->header)) continue;
    for (v = 0; v < f->value_count; ++v)
      if (bytes_equal(in->headers[h].value, &f->values[v])) return 1;
  }
  return 0;
}

static walrelay_status filter_apply(void *instance, const walrelay_record *in, walrelay_record *out,
                                    char *error, size_t error_size) {
  const filter *f = (const filter *)instance;
  (void)out; /* a kept record passes unchanged */
  (void)error;
  (void)error_size;
  return filter_matches(f, in) != f->negate ? WALRELAY_DROP : WALRELAY_OK;
}

static const walrelay_transform_plugin kFilterPlugin = {sizeof(walrelay_transform_plugin),
                                                        WALRELAY_TRANSFORM_ABI_VERSION,
                                                        "filter",
                                                        "1.0.0",
                                                        filter_create,
                                                        filter_apply,
                                                        filter_destroy};

const walrelay_transform_plugin *walrelay_transform_entry(uint32_t host_abi_version) {
  return host_abi_version == WALRELAY_TRANSFORM_ABI_VERSION ? &kFilterPlugin : NULL;
}
