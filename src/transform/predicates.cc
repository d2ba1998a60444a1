#include "transform/predicates.h"

#include <functional>
#include <utility>

#include "transform/java_regex.h"

namespace walrelay {
namespace {

constexpr const char* kPredicatePackage = "org.apache.kafka.connect.transforms.predicates.";

class TopicNameMatches final : public Predicate {
 public:
  explicit TopicNameMatches(TopicRegex pattern) : pattern_(std::move(pattern)) {}
  // A match of the whole name, as Java's Matcher.matches().
  bool Test(const Record& record) const override {
    return pattern_.Apply(record.topic).has_value();
  }

 private:
  TopicRegex pattern_;
};

class HasHeaderKey final : public Predicate {
 public:
  explicit HasHeaderKey(std::string name) : name_(std::move(name)) {}
  bool Test(const Record& record) const override { return record.FindHeader(name_) != nullptr; }

 private:
  std::string name_;
};

class RecordIsTombstone final : public Predicate {
 public:
  // A record still holding its structured change event has a value, so it is no tombstone,
  // unless it is the tombstone after a delete (tombstones.on.delete).
  bool Test(const Record& record) const override {
    if (record.source.tombstone) return true;
    return record.change == nullptr && !record.value.has_value();
  }
};

using PredicatePtr = std::shared_ptr<const Predicate>;
using PredicateFactory = std::function<Result<PredicatePtr>(const Properties&)>;

struct PredicateType {
  const char* name;  // Kafka Connect's simple class name
  PredicateFactory make;
};

const std::vector<PredicateType>& PredicateTypes() {
  static const std::vector<PredicateType> kTypes = {
      {"TopicNameMatches",
       [](const Properties& props) -> Result<PredicatePtr> {
         auto pattern = props.GetRequired("pattern");
         if (!pattern.ok()) return pattern.status();
         auto regex = TopicRegex::Compile(*pattern, "", props.FullKey("pattern"));
         if (!regex.ok()) return regex.status();
         return PredicatePtr(std::make_shared<TopicNameMatches>(std::move(regex).value()));
       }},
      {"HasHeaderKey",
       [](const Properties& props) -> Result<PredicatePtr> {
         auto name = props.GetRequired("name");
         if (!name.ok()) return name.status();
         return PredicatePtr(std::make_shared<HasHeaderKey>(*name));
       }},
      {"RecordIsTombstone",
       [](const Properties&) -> Result<PredicatePtr> {
         return PredicatePtr(std::make_shared<RecordIsTombstone>());
       }},
  };
  return kTypes;
}

Result<PredicatePtr> MakePredicate(const Properties& props) {
  auto type = props.GetRequired("type");
  if (!type.ok()) return type.status();
  const std::string name = Trim(*type);
  std::string known;
  for (const PredicateType& t : PredicateTypes()) {
    if (name == t.name || name == kPredicatePackage + std::string(t.name)) return t.make(props);
    known += (known.empty() ? "" : ", ") + std::string(kPredicatePackage) + t.name;
  }
  return Status::Config("'" + props.FullKey("type") + "' is '" + *type +
                        "', which is not a known predicate; known: " + known);
}

}  // namespace

Result<PredicateMap> BuildPredicates(const Properties& config) {
  PredicateMap predicates;
  for (const std::string& name : config.GetList("predicates", {})) {
    if (predicates.count(name)) {
      return Status::Config("'predicates' names '" + name + "' twice");
    }
    auto predicate = MakePredicate(config.Scoped("predicates." + name + "."));
    if (!predicate.ok()) return predicate.status();
    predicates.emplace(name, std::move(predicate).value());
  }
  return predicates;
}

}  // namespace walrelay
