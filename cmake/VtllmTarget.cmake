# Common settings for every vtllm target.
function(vtllm_set_options target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${VTLLM_WARNINGS}>)
  if(VTLLM_STATIC_RUNTIME)
    get_target_property(_type ${target} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
    endif()
  endif()
endfunction()

# Sources of a layer: every .cpp (and .cu when CUDA is on) below the given folders.
# Globbing lets each family add its own file pair without editing a shared list.
function(vtllm_glob_sources out)
  set(_all)
  foreach(dir IN LISTS ARGN)
    file(GLOB_RECURSE _cpp CONFIGURE_DEPENDS ${dir}/*.cpp)
    list(APPEND _all ${_cpp})
  endforeach()
  set(${out} ${_all} PARENT_SCOPE)
endfunction()
