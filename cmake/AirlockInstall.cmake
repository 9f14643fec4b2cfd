include(CMakePackageConfigHelpers)
install(DIRECTORY include/airlock DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT airlockTargets NAMESPACE airlock:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/airlock)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/airlockConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/airlockConfig.cmake
  "include(CMakeFindDependencyMacro)\n"
  "find_dependency(Threads)\n"
  "include(\${CMAKE_CURRENT_LIST_DIR}/airlockTargets.cmake)\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/airlockConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/airlockConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/airlock)
