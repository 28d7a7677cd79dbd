# Finds cuDNN (library and cudnn.h) and the header-only cudnn-frontend (cudnn_frontend.h), and
# defines the imported target CudnnFrontend::CudnnFrontend that carries both.
#
# cudnn-frontend headers are looked for, in order:
#   1. CUDNN_FRONTEND_INCLUDE_DIR (cache variable or environment variable)
#   2. <python3 purelib>/include (pip install nvidia-cudnn-frontend puts them there)
#   3. <source>/build-cuda-deps/cudnn-frontend/include (scripts/device-run.sh --prepare-deps)
# cuDNN: CUDNN_ROOT / CUDNN_INCLUDE_DIR / CUDNN_LIBRARY, else the CUDA toolkit's folders and the
# system's (/usr/include, /usr/lib/x86_64-linux-gnu), else the pip wheel nvidia-cudnn-cu*.
#
# Sets CudnnFrontend_FOUND, CUDNN_FRONTEND_INCLUDE_DIR, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY.

set(_spattn_cudnn_fe_hints "")
if(DEFINED ENV{CUDNN_FRONTEND_INCLUDE_DIR})
  list(APPEND _spattn_cudnn_fe_hints "$ENV{CUDNN_FRONTEND_INCLUDE_DIR}")
endif()
set(_spattn_python_purelib "")
find_program(_spattn_python3 NAMES python3 python)
if(_spattn_python3)
  execute_process(COMMAND "${_spattn_python3}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _spattn_python_purelib OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _spattn_python_status)
  if(NOT _spattn_python_status EQUAL 0)
    set(_spattn_python_purelib "")
  endif()
endif()
if(_spattn_python_purelib)
  list(APPEND _spattn_cudnn_fe_hints "${_spattn_python_purelib}/include")
endif()
list(APPEND _spattn_cudnn_fe_hints "${PROJECT_SOURCE_DIR}/build-cuda-deps/cudnn-frontend/include")

find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_spattn_cudnn_fe_hints} NO_DEFAULT_PATH)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h)  # then the default places (/usr/include, ...)

set(_spattn_cudnn_include_hints "")
set(_spattn_cudnn_library_hints "")
foreach(_root IN ITEMS "${CUDNN_ROOT}" "$ENV{CUDNN_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}")
  if(_root)
    list(APPEND _spattn_cudnn_include_hints "${_root}/include")
    list(APPEND _spattn_cudnn_library_hints "${_root}/lib64" "${_root}/lib")
  endif()
endforeach()
list(APPEND _spattn_cudnn_include_hints ${CUDAToolkit_INCLUDE_DIRS})
list(APPEND _spattn_cudnn_library_hints "${CUDAToolkit_LIBRARY_DIR}")
if(_spattn_python_purelib)
  file(GLOB _spattn_cudnn_wheels LIST_DIRECTORIES true "${_spattn_python_purelib}/nvidia/cudnn*")
  foreach(_wheel IN LISTS _spattn_cudnn_wheels)
    list(APPEND _spattn_cudnn_include_hints "${_wheel}/include")
    list(APPEND _spattn_cudnn_library_hints "${_wheel}/lib")
  endforeach()
endif()
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_spattn_cudnn_include_hints})
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_spattn_cudnn_library_hints}
             PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CudnnFrontend
  REQUIRED_VARS CUDNN_FRONTEND_INCLUDE_DIR CUDNN_INCLUDE_DIR CUDNN_LIBRARY
  REASON_FAILURE_MESSAGE
    "the CUDA kernels need cuDNN (libcudnn, cudnn.h) and the cudnn-frontend headers: \
pip install nvidia-cudnn-frontend, or set CUDNN_FRONTEND_INCLUDE_DIR / CUDNN_ROOT, or carry \
build-cuda-deps/cudnn-frontend/include (scripts/device-run.sh --prepare-deps)")

if(CudnnFrontend_FOUND AND NOT TARGET CudnnFrontend::CudnnFrontend)
  add_library(CudnnFrontend::CudnnFrontend INTERFACE IMPORTED)
  # SYSTEM: the frontend's headers are not ours to warn about.
  set_target_properties(CudnnFrontend::CudnnFrontend PROPERTIES
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR};${CUDNN_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR};${CUDNN_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CUDNN_LIBRARY}"
    # No JSON serialization (saves compile time; spattn never serializes graphs).
    INTERFACE_COMPILE_DEFINITIONS "CUDNN_FRONTEND_SKIP_JSON_LIB")
endif()
mark_as_advanced(CUDNN_FRONTEND_INCLUDE_DIR CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
