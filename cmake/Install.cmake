# Installed CMake package `vtllm`: targets vtllm::vt and vtllm::vtllm, umbrella header <vt/vt.h>;
# vtllm::capi, the C ABI (a shared library) with <vtllm.h>.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(vtllm_all INTERFACE)
set_target_properties(vtllm_all PROPERTIES EXPORT_NAME vtllm)
target_link_libraries(vtllm_all INTERFACE vtllm_engine vtllm_model vtllm_tokenizer vtllm_vt)

install(TARGETS vtllm_vt vtllm_model vtllm_engine vtllm_default_model vtllm_tokenizer vtllm_all vtllm_capi EXPORT vtllmTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS vtllm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/model ${PROJECT_SOURCE_DIR}/src/engine ${PROJECT_SOURCE_DIR}/src/tokenizer
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT vtllmTargets NAMESPACE vtllm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vtllm)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/vtllmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/vtllmConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vtllm)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vtllmConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vtllmConfig.cmake ${PROJECT_BINARY_DIR}/vtllmConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/vtllm)
