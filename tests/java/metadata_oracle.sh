#!/usr/bin/env bash
# metadata_oracle.sh - build "metadata-oracle": KafkaMetadataImage.java (next to this script) compiled against
# Kafka's own metadata and raft modules, on top of the Kafka oracle build (../shared/kafka-oracle/build.sh).
#
#   MIRRORS=<folder of the fetched mirrors> tests/java/metadata_oracle.sh    build, print the launcher path
#   <launcher> image DIR      Kafka's metadata image of the metadata log dir DIR, one JSON object
#   <launcher> records DIR    every metadata record Kafka reads there, one JSON line each
#
# Needs the oracle built first ($KAFKA_ORACLE_HOME, default ~/.cache/kafka-oracle: its sources, generated message
# classes, message generator and jars) and the bare apache/kafka mirror (`fetch github:apache/kafka`), read at the
# oracle's commit. Everything goes to $KAFKA_ORACLE_HOME/metadata and the launcher $KAFKA_ORACLE_HOME/metadata-oracle,
# never into this repository. tests/test_metadata_image.py skips its Kafka comparison when the launcher is absent.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ORACLE="${KAFKA_ORACLE_HOME:-$HOME/.cache/kafka-oracle}"
OUT="$ORACLE/metadata"
LAUNCHER="$ORACLE/metadata-oracle"
MIRRORS="${MIRRORS:?set MIRRORS to the folder where fetch put the mirrors (<owner>+<name>/repo under it)}"
KAFKA_GIT="${KAFKA_GIT:-$MIRRORS/apache+kafka/repo}"
die() { echo "[metadata-oracle] ERROR: $*" >&2; exit 1; }
say() { echo "[metadata-oracle] $*" >&2; }

[ -f "$ORACLE/BUILD-INFO" ] && [ -d "$ORACLE/src" ] && [ -d "$ORACLE/classes/generator" ] \
    || die "build the Kafka oracle first (../shared/kafka-oracle/build.sh)"
KAFKA_COMMIT="$(awk '$1 == "kafka" {print $3}' "$ORACLE/BUILD-INFO")"
STAMP="$KAFKA_COMMIT $(sha256sum "$HERE/KafkaMetadataImage.java" "$HERE/metadata_oracle.sh" | cut -c1-64 | tr '\n' ' ')"
if [ -x "$LAUNCHER" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]; then
    say "up to date"; echo "$LAUNCHER"; exit 0
fi
git --git-dir="$KAFKA_GIT" cat-file -e "$KAFKA_COMMIT^{commit}" 2>/dev/null || die "commit $KAFKA_COMMIT not in $KAFKA_GIT"

rm -rf "$OUT"
mkdir -p "$OUT/src" "$OUT/gen" "$OUT/classes"
say "extracting Kafka's metadata and raft modules at $KAFKA_COMMIT"
git --git-dir="$KAFKA_GIT" archive "$KAFKA_COMMIT" metadata/src/main raft/src/main | tar -x -C "$OUT/src"

J=/usr/share/java
JACKSON="$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar"
GEN="java -cp $ORACLE/classes/generator:$JACKSON:$J/argparse4j.jar org.apache.kafka.message.MessageGenerator"
say "generating the metadata records and raft messages (build.gradle's processMessages of :metadata and :raft)"
(cd "$OUT/src/metadata" && $GEN -p org.apache.kafka.common.metadata -o "$OUT/gen/metadata/org/apache/kafka/common/metadata" \
    -i src/main/resources/common/metadata -m MessageDataGenerator JsonConverterGenerator \
    -t MetadataRecordTypeGenerator MetadataJsonConvertersGenerator >/dev/null)
(cd "$OUT/src/raft" && $GEN -p org.apache.kafka.raft.generated -o "$OUT/gen/raft/org/apache/kafka/raft/generated" \
    -i src/main/resources/common/message -m MessageDataGenerator JsonConverterGenerator >/dev/null)

S="$ORACLE/src"
SP="$OUT/src/metadata/src/main/java:$OUT/gen/metadata:$OUT/src/raft/src/main/java:$OUT/gen/raft"
SP="$SP:$S/clients/src/main/java:$ORACLE/gen/clients:$S/server-common/src/main/java:$S/yammer/metrics-core/src/main/java"
# org.pcollections (server-common's immutable maps, under the metadata image): Kafka 4.0's 4.0.x, from a local
# Maven repository (Debian does not package it); PCOLLECTIONS_JAR names another copy.
PCOLLECTIONS="${PCOLLECTIONS_JAR:-$HOME/.m2/repository/org/pcollections/pcollections/4.0.2/pcollections-4.0.2.jar}"
[ -f "$PCOLLECTIONS" ] || die "pcollections jar not found at $PCOLLECTIONS (set PCOLLECTIONS_JAR)"
RUNCP="$PCOLLECTIONS:$J/slf4j-api.jar:$J/lz4-java.jar:$J/zstd-jni.jar:$J/snappy-java.jar:$JACKSON:$J/protobuf.jar"
say "compiling KafkaMetadataImage.java and the Kafka classes it reaches"
javac -nowarn -encoding UTF-8 -d "$OUT/classes" -cp "$ORACLE/classes/oracle:$RUNCP" -sourcepath "$SP" \
    "$HERE/KafkaMetadataImage.java" 2>&1 | grep -v '^Note:' >&2 || true
[ -f "$OUT/classes/KafkaMetadataImage.class" ] || die "javac failed"

cat > "$LAUNCHER" <<EOF
#!/bin/sh
# Kafka's metadata image of a KRaft metadata log dir (Kafka $KAFKA_COMMIT). Usage: metadata-oracle image|records DIR
exec java -Xmx512M -Djava.library.path=/usr/lib/x86_64-linux-gnu/jni:/usr/lib/x86_64-linux-gnu:/usr/lib/jni \\
  -Dorg.slf4j.simpleLogger.defaultLogLevel="\${ORACLE_LOG_LEVEL:-warn}" -Dorg.slf4j.simpleLogger.logFile=System.err \\
  -cp "$OUT/classes:$ORACLE/classes/oracle:$J/slf4j-simple.jar:$RUNCP" KafkaMetadataImage "\$@"
EOF
chmod +x "$LAUNCHER"
echo "$STAMP" > "$OUT/.stamp"
say "built $LAUNCHER"
echo "$LAUNCHER"
