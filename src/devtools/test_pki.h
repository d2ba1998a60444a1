// TestPki: throwaway certificate authorities and certificates made with the openssl CLI, for
// the TLS tests (PostgreSQL) and the Kafka sandbox's SSL listeners.
//
// Contract: every file lands in `dir`, named after the `name` given: <name>.crt (PEM
// certificate) and <name>.key (PEM private key, unencrypted, mode 0600). Keys are EC P-256,
// because RSA keys take seconds each; certificates are valid for a week. Errors carry
// openssl's output.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace walrelay::devtools {

class TestPki {
 public:
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string CertPath(const std::string& name) const { return dir_ + "/" + name + ".crt"; }
  std::string KeyPath(const std::string& name) const { return dir_ + "/" + name + ".key"; }

  // A self-signed CA.
  Status MakeCa(const std::string& name, const std::string& common_name) const;
  // A certificate signed by the CA `ca` (made by MakeCa); `extensions` are openssl x509v3
  // lines such as "subjectAltName = IP:127.0.0.1" or "extendedKeyUsage = clientAuth".
  Status MakeSigned(const std::string& name, const std::string& common_name, const std::string& ca,
                    const std::string& extensions) const;
  // <name>.p12: the certificate, its key and the CA chain in a PKCS#12 store (for Java).
  Status MakePkcs12(const std::string& name, const std::string& ca,
                    const std::string& password) const;

 private:
  Status OpenSsl(std::vector<std::string> args) const;

  std::string dir_;
};

}  // namespace walrelay::devtools
