# Finds oneCCL for CPUs (Intel's collective library: oneapi/ccl.hpp and the static CPU libccl.a
# that the pip wheel oneccl-cpu-devel carries; scripts/install-dependencies.sh unpacks them into
# /opt/oneccl-cpu) and defines the imported target OneCCL::ccl.
#
# Looked for under ONECCL_ROOT (cache or environment variable), then /opt/oneccl-cpu. The library
# loads libfabric at run time (its transport) and links hwloc, which must be found too.
#
# Sets OneCCL_FOUND, ONECCL_INCLUDE_DIR, ONECCL_LIBRARY.

set(_spattn_oneccl_hints ${ONECCL_ROOT} $ENV{ONECCL_ROOT} /opt/oneccl-cpu)
find_path(ONECCL_INCLUDE_DIR oneapi/ccl.hpp HINTS ${_spattn_oneccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(ONECCL_LIBRARY NAMES libccl.a HINTS ${_spattn_oneccl_hints} PATH_SUFFIXES lib NO_DEFAULT_PATH)
find_library(ONECCL_HWLOC_LIBRARY hwloc)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneCCL
  REQUIRED_VARS ONECCL_INCLUDE_DIR ONECCL_LIBRARY ONECCL_HWLOC_LIBRARY
  REASON_FAILURE_MESSAGE
    "the oneccl transport needs oneCCL's headers and CPU library (scripts/install-dependencies.sh unpacks the pip \
wheel oneccl-cpu-devel into /opt/oneccl-cpu, or set ONECCL_ROOT) and hwloc (libhwloc-dev)")

if(OneCCL_FOUND AND NOT TARGET OneCCL::ccl)
  find_package(Threads REQUIRED)
  add_library(OneCCL::ccl STATIC IMPORTED)
  # SYSTEM: oneCCL's headers are not ours to warn about.
  set_target_properties(OneCCL::ccl PROPERTIES
    IMPORTED_LOCATION "${ONECCL_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${ONECCL_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${ONECCL_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${ONECCL_HWLOC_LIBRARY};${CMAKE_DL_LIBS};Threads::Threads")
endif()
