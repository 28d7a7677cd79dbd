#pragma once

#include <string>

namespace spattn::app {

/// `spattn info`: the backends, block kernels and communicators built in, the devices and threads.
std::string info_text(bool json);

}  // namespace spattn::app
