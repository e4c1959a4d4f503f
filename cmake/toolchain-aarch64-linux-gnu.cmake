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

# try_run and gtest_discover_tests run target binaries through qemu.
find_program(_qemu qemu-aarch64)
if(_qemu)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${_qemu};-L;/usr/${_triple})
endif()
