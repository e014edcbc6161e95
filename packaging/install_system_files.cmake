# Runs at install time (install(CODE) in packaging/CMakeLists.txt), with the prefix of this install
# in CMAKE_INSTALL_PREFIX: `cmake --install build --prefix P` or CPack's /usr. Installs
#  - the systemd unit, PREFIX/lib/systemd/system/rankmapd.service: configs/rankmapd.service with
#    ExecStart, the config path and Documentation= pointing into this prefix;
#  - the default config, SYSCONFDIR/rankmap/rankmapd.json, where SYSCONFDIR is /etc for the /usr
#    prefix and PREFIX/etc otherwise (GNUInstallDirs' rule for /usr; its /etc/opt rule for /opt
#    prefixes is not followed).
# Inputs: RANKMAP_SOURCE_DIR, RANKMAP_BINARY_DIR (where the unit is written first), and
# RANKMAP_SBINDIR, RANKMAP_SYSCONFDIR, RANKMAP_DOCDIR (relative to the prefix or absolute).
# file(INSTALL) adds DESTDIR, as the generated install rules do.
function(rankmapFullDir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

string(REGEX REPLACE "/+$" "" prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr" AND NOT IS_ABSOLUTE "${RANKMAP_SYSCONFDIR}")
  set(sysconfdir "/${RANKMAP_SYSCONFDIR}")
else()
  rankmapFullDir(sysconfdir "${RANKMAP_SYSCONFDIR}")
endif()
rankmapFullDir(sbindir "${RANKMAP_SBINDIR}")
rankmapFullDir(docdir "${RANKMAP_DOCDIR}")

# The unit: one source (configs/rankmapd.service, written for a manual install under /usr/local),
# its three paths replaced; a line that is not found is an error, not a unit left pointing at
# /usr/local.
set(unit_source "${RANKMAP_SOURCE_DIR}/configs/rankmapd.service")
file(READ "${unit_source}" unit)
string(REGEX REPLACE "^(#[^\n]*\n)+" "" unit "${unit}")
foreach(rule
    "ExecStart=[^ \n]*/rankmapd;ExecStart=${sbindir}/rankmapd"
    "--config [^ \n]*/rankmapd.json;--config ${sysconfdir}/rankmap/rankmapd.json"
    "Documentation=file://[^ \n]*/probing.md;Documentation=file://${docdir}/probing.md")
  list(GET rule 0 pattern)
  list(GET rule 1 replacement)
  if(NOT unit MATCHES "${pattern}")
    message(FATAL_ERROR "${unit_source}: no line matches '${pattern}'; the installed unit needs it")
  endif()
  string(REGEX REPLACE "${pattern}" "${replacement}" unit "${unit}")
endforeach()
set(unit "# systemd unit for rankmapd, the rankmap probe agent (one per VM), installed with rankmap.
# Before `systemctl enable --now rankmapd`: create ${sysconfdir}/rankmap/hosts, probe.key and
# token as README.md (Install on a cluster) says.
${unit}")
set(generated "${RANKMAP_BINARY_DIR}/rankmapd.service")
file(WRITE "${generated}" "${unit}")
file(INSTALL DESTINATION "${prefix}/lib/systemd/system" TYPE FILE FILES "${generated}")

file(INSTALL DESTINATION "${sysconfdir}/rankmap" TYPE FILE
     FILES "${RANKMAP_SOURCE_DIR}/configs/rankmapd.json")
