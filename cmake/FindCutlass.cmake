# Finds the header-only CUTLASS/CuTe (cute/tensor.hpp, cutlass/cutlass.h) that spattn's own Hopper
# kernels are written with, and defines the imported target Cutlass::Cutlass.
#
# Looked for, in order:
#   1. CUTLASS_INCLUDE_DIR (cache variable or environment variable)
#   2. <python3 purelib>/cutlass_library/source/include (pip install nvidia-cutlass puts them there)
#   3. <source>/build-cuda-deps/cutlass/include (the wheel unpacked by scripts/device-run.sh)
#
# Sets Cutlass_FOUND and CUTLASS_INCLUDE_DIR.

set(_spattn_cutlass_hints "")
if(DEFINED ENV{CUTLASS_INCLUDE_DIR})
  list(APPEND _spattn_cutlass_hints "$ENV{CUTLASS_INCLUDE_DIR}")
endif()
find_program(_spattn_cutlass_python3 NAMES python3 python)
if(_spattn_cutlass_python3)
  execute_process(COMMAND "${_spattn_cutlass_python3}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _spattn_cutlass_purelib OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _spattn_cutlass_status)
  if(_spattn_cutlass_status EQUAL 0 AND _spattn_cutlass_purelib)
    list(APPEND _spattn_cutlass_hints "${_spattn_cutlass_purelib}/cutlass_library/source/include")
  endif()
endif()
list(APPEND _spattn_cutlass_hints "${PROJECT_SOURCE_DIR}/build-cuda-deps/cutlass/include")

find_path(CUTLASS_INCLUDE_DIR cute/tensor.hpp HINTS ${_spattn_cutlass_hints} NO_DEFAULT_PATH)
find_path(CUTLASS_INCLUDE_DIR cute/tensor.hpp)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Cutlass
  REQUIRED_VARS CUTLASS_INCLUDE_DIR
  REASON_FAILURE_MESSAGE
    "spattn's own Hopper kernels need the CUTLASS/CuTe headers: pip install nvidia-cutlass, or set \
CUTLASS_INCLUDE_DIR, or carry build-cuda-deps/cutlass (scripts/device-run.sh --prepare-deps)")

if(Cutlass_FOUND AND NOT TARGET Cutlass::Cutlass)
  add_library(Cutlass::Cutlass INTERFACE IMPORTED)
  # SYSTEM: CUTLASS's headers are not ours to warn about.
  set_target_properties(Cutlass::Cutlass PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${CUTLASS_INCLUDE_DIR}"
                                                    INTERFACE_INCLUDE_DIRECTORIES "${CUTLASS_INCLUDE_DIR}")
endif()
mark_as_advanced(CUTLASS_INCLUDE_DIR)
