# Cross build for 64-bit ARM Linux with Debian's GCC cross compiler
# (g++-aarch64-linux-gnu; sysroot /usr/aarch64-linux-gnu). scripts/build_aarch64.sh uses it;
# the binaries run on this x86 machine under `qemu-aarch64 -L /usr/aarch64-linux-gnu`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(_triple aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${_triple}-gcc)
set(CMAKE_CXX_COMPILER ${_triple}-g++)

# Libraries, headers and CMake packages come from the target's tree only, never from the
# host's x86 /usr (programs, e.g. pkg-config, still come from the host).
set(CMAKE_FIND_ROOT_PATH /usr/${_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The aarch64 pcre2, utf8proc and xxhash (headers, static archives, pkg-config files) that
# scripts/setup.sh --arm unpacks from Debian's arm64 packages into a folder of their own:
# a second root for the find_* commands, and the only place pkg-config looks (never the
# host's x86 .pc files). Without the folder pkg-config finds nothing there and the layers
# that need them (tokenizer, engine) fail to configure; VTLLM_CORE_ONLY builds without them.
# The compiler checks (try_compile) read this file again in the same process, whose
# environment pkg-config sees: they get the folder too, so both set the same paths.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES VTLLM_AARCH64_DEPS)
if(VTLLM_AARCH64_DEPS)
  list(APPEND CMAKE_FIND_ROOT_PATH ${VTLLM_AARCH64_DEPS})
  set(ENV{PKG_CONFIG_LIBDIR} ${VTLLM_AARCH64_DEPS}/usr/lib/${_triple}/pkgconfig)
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${VTLLM_AARCH64_DEPS})
else()
  set(ENV{PKG_CONFIG_LIBDIR} /usr/${_triple}/lib/pkgconfig)
endif()

# try_run and gtest_discover_tests run target binaries through qemu.
find_program(_qemu qemu-aarch64)
if(_qemu)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${_qemu};-L;/usr/${_triple})
endif()
