#pragma once
// Sets an environment variable on this rank for the lifetime of an object: the settings that a
// communicator reads when it is made (SPATTN_TIMEOUT, SPATTN_FAULT).

#include <cstdlib>
#include <string>

namespace spattn {

class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnvironment() { unsetenv(name_); }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  const char* name_;
};

}  // namespace spattn
