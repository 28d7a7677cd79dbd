#pragma once
// The names users spell for the values of an enumeration (algorithms, transports, kernel choices,
// dtypes, device kinds), in one table per enumeration: the name of a value, the value of a name
// with the error that lists what is allowed, and the values in order are all read from the same
// entries.

#include <initializer_list>
#include <string>
#include <vector>

#include "spattn/error.hpp"

namespace spattn {

template <class Enum>
class NameTable {
 public:
  struct Entry {
    Enum value;
    const char* name;
  };

  /// `what` names the enumeration in errors ("unknown <what> 'x'; allowed: ..."). A value may
  /// have several entries: its first name is the one shown, the others are accepted too.
  NameTable(const char* what, std::initializer_list<Entry> entries) : what_(what), entries_(entries) {}

  /// The first name of `value` ("unknown" for a value outside the table).
  std::string name(Enum value) const {
    for (const Entry& entry : entries_)
      if (entry.value == value) return entry.name;
    return "unknown";
  }

  /// The value named `name`; throws Error naming it and the allowed names.
  Enum parse(const std::string& name) const {
    for (const Entry& entry : entries_)
      if (name == entry.name) return entry.value;
    SPATTN_FAIL("unknown " << what_ << " '" << name << "'; allowed: " << allowed());
  }

  /// Every value, in the table's order.
  std::vector<Enum> values() const {
    std::vector<Enum> result;
    for (const Entry& entry : entries_)
      if (name(entry.value) == entry.name) result.push_back(entry.value);
    return result;
  }

  /// The first name of every value, in order: "a, b, c".
  std::string allowed() const {
    std::string names;
    for (Enum value : values()) names += (names.empty() ? "" : ", ") + name(value);
    return names;
  }

 private:
  const char* what_;
  std::vector<Entry> entries_;
};

}  // namespace spattn
