#include "devtools/test_pki.h"

#include <sys/stat.h>

#include <fstream>
#include <vector>

#include "devtools/child_process.h"

namespace walrelay::devtools {
namespace {

const std::vector<std::string> kNewKey = {"-newkey", "ec", "-pkeyopt",
                                          "ec_paramgen_curve:prime256v1", "-nodes"};

}  // namespace

Status TestPki::OpenSsl(std::vector<std::string> args) const {
  const std::string what = args.empty() ? "" : args.front();
  args.insert(args.begin(), "openssl");
  const std::string log = dir_ + "/openssl.log";
  auto child = ChildProcess::Spawn(args, log, {}, dir_);
  if (!child.ok()) return child.status();
  auto code = (*child)->Wait(std::chrono::seconds(60));
  if (!code.ok()) return code.status();
  if (*code != 0)
    return Status::Internal("openssl " + what + " exited with " + std::to_string(*code) + ": " +
                            ReadFile(log));
  return Status::Ok();
}

Status TestPki::MakeCa(const std::string& name, const std::string& common_name) const {
  std::vector<std::string> args = {
      "req",         "-x509", "-keyout", name + ".key", "-out",
      name + ".crt", "-days", "7",       "-subj",       "/CN=" + common_name};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  return OpenSsl(args);
}

Status TestPki::MakeSigned(const std::string& name, const std::string& common_name,
                           const std::string& ca, const std::string& extensions) const {
  std::vector<std::string> args = {"req",         "-keyout", name + ".key",       "-out",
                                   name + ".csr", "-subj",   "/CN=" + common_name};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  WALRELAY_RETURN_IF_ERROR(OpenSsl(args));
  if (!(std::ofstream(dir_ + "/" + name + ".ext") << extensions << "\n"))
    return Status::Internal("cannot write " + dir_ + "/" + name + ".ext");
  WALRELAY_RETURN_IF_ERROR(
      OpenSsl({"x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
               "-CAcreateserial", "-out", name + ".crt", "-days", "7", "-extfile", name + ".ext"}));
  // libpq and PostgreSQL refuse a private key that others may read.
  if (::chmod(KeyPath(name).c_str(), 0600) != 0)
    return Status::Internal("cannot chmod " + KeyPath(name));
  return Status::Ok();
}

Status TestPki::MakePkcs12(const std::string& name, const std::string& ca,
                           const std::string& password) const {
  return OpenSsl({"pkcs12", "-export", "-in", name + ".crt", "-inkey", name + ".key", "-certfile",
                  ca + ".crt", "-name", name, "-out", name + ".p12", "-passout",
                  "pass:" + password});
}

}  // namespace walrelay::devtools
