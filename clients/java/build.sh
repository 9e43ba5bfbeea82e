#!/usr/bin/env bash
# Builds the JVM client with the JDK's own tools and runs its tests with
# Debian's JUnit 5 (apt-get install openjdk-17-jdk-headless junit5): no
# network, no Maven or Gradle. Output under build/:
#   build/redlock-client.jar   the library (JDK 16+)
#   build/test-results/        the tests' XML reports
# The tests start `redlock-agent dev`: $REDLOCK_AGENT, or the repository's
# target/debug/redlock-agent (cargo build -p redlock-agent).
#   ./build.sh          compile, jar, test
#   ./build.sh jar      compile and jar only
set -euo pipefail
cd "$(dirname "$0")"
JUNIT="${JUNIT_CONSOLE:-/usr/share/java/junit-platform-console-standalone.jar}"

rm -rf build
mkdir -p build/classes build/test-classes
javac --release 16 -Xlint:all -Werror -d build/classes $(find src/main/java -name '*.java')
# A module name for JPMS users (the jar has no module-info of its own).
printf 'Automatic-Module-Name: redlockagent\n' > build/MANIFEST.MF
jar --create --file build/redlock-client.jar --manifest build/MANIFEST.MF -C build/classes .
echo "built build/redlock-client.jar"
[ "${1:-}" = jar ] && exit 0

if [ ! -f "$JUNIT" ]; then
  echo "no JUnit console launcher at $JUNIT: apt-get install junit5 (or set JUNIT_CONSOLE)" >&2
  exit 1
fi
# Tests are in the library's package (they reach its package-private JSON).
javac --release 16 -d build/test-classes -cp "build/classes:$JUNIT" $(find src/test/java -name '*.java')
java -jar "$JUNIT" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
  --reports-dir build/test-results \
  --class-path "build/classes:build/test-classes" --select-package redlockagent
