#include "delivery/transactional_ids.h"

#include <string_view>

namespace walrelay {
namespace {

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string DefaultTransactionalId(const std::string& connector_name) {
  std::string id = "walrelay-" + connector_name;
  if (EndsWith(connector_name, kSecondIdSuffix) || EndsWith(connector_name, "%")) id += '%';
  return id;
}

std::string SecondTransactionalId(const std::string& first_id) {
  return first_id + kSecondIdSuffix;
}

Status CheckTransactionalId(const std::string& id) {
  if (!EndsWith(id, kSecondIdSuffix)) return Status::Ok();
  const std::string other = id.substr(0, id.size() - std::string_view(kSecondIdSuffix).size());
  return Status::Config("'transactional.id' is '" + id + "', which ends with '" + kSecondIdSuffix +
                        "': the relay's second producer uses its id followed by '" +
                        kSecondIdSuffix + "', so this would be the second id of a connector " +
                        "whose transactional.id is '" + other +
                        "' and the two would fence each other; choose an id that does not end "
                        "with '" +
                        kSecondIdSuffix + "'");
}

}  // namespace walrelay
