#!/usr/bin/env bash
# telemetryd installer (docs/executable.md): builds the single executable, installs it,
# creates the system user and data directory, installs and enables the systemd unit.
# Idempotent: running it again upgrades the executable and changes nothing else.
# --uninstall removes the executable and the unit, never the data (nor the user owning it).
set -euo pipefail

PREFIX=/usr/local/bin
DATA_DIR=/var/lib/telemetryd
SERVICE_USER=telemetryd
UNIT_FILE=/etc/systemd/system/telemetryd.service
BINARY=""
BUILD=1
SYSTEMD=1
UNINSTALL=0
PRINT_UNIT=0

usage() {
  cat <<EOF
Usage: ./install.sh [options]        (as root, from a telemetryd checkout)

Builds dist/telemetryd (npm ci && npm run build:binary), installs it as PREFIX/telemetryd,
creates the system user '$SERVICE_USER' and the data directory (mode 0700), and installs and
enables the systemd unit telemetryd.service (skipped where systemd is not running).

Options:
  --prefix DIR      directory the executable goes into (default: $PREFIX)
  --data-dir DIR    data directory of the service (default: $DATA_DIR)
  --binary FILE     install this already built executable; do not build
  --no-build        install the existing dist/telemetryd; do not build
  --no-systemd      do not install the systemd unit even where systemd runs
  --print-unit      print the systemd unit for these options and exit
  --uninstall       stop and remove the unit and the executable; keeps the data and the user
  -h, --help        this help
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) PREFIX="${1#*=}"; shift ;;
    --data-dir) DATA_DIR="${2:?--data-dir needs a directory}"; shift 2 ;;
    --data-dir=*) DATA_DIR="${1#*=}"; shift ;;
    --binary) BINARY="${2:?--binary needs a file}"; BUILD=0; shift 2 ;;
    --binary=*) BINARY="${1#*=}"; BUILD=0; shift ;;
    --no-build) BUILD=0; shift ;;
    --no-systemd) SYSTEMD=0; shift ;;
    --print-unit) PRINT_UNIT=1; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "install.sh: $*"; }
die() { echo "install.sh: $*" >&2; exit 1; }

# The unit runs the executable from PREFIX against DATA_DIR: both must be absolute.
case "$PREFIX" in /*) ;; *) PREFIX="$(pwd)/$PREFIX" ;; esac
case "$DATA_DIR" in /*) ;; *) DATA_DIR="$(pwd)/$DATA_DIR" ;; esac
EXE="$PREFIX/telemetryd"
if [ -n "$BINARY" ]; then case "$BINARY" in /*) ;; *) BINARY="$(pwd)/$BINARY" ;; esac; fi

unit() {
  cat <<EOF
# Installed by telemetryd's install.sh; overwritten on the next run (put local changes in
# a drop-in: systemctl edit telemetryd). Settings: TELEMETRYD_* in /etc/default/telemetryd.
[Unit]
Description=telemetryd: IoT telemetry (HTTP and MQTT ingest, Public API, dashboard)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User=$SERVICE_USER
Group=$SERVICE_USER
EnvironmentFile=-/etc/default/telemetryd
ExecStart=$EXE serve --data-dir $DATA_DIR
Restart=on-failure
RestartSec=2
# serve finishes in-flight writes and closes the database on SIGTERM (exit 0 within 10 s).
KillSignal=SIGTERM
TimeoutStopSec=20
UMask=0077
# Hardening. Not MemoryDenyWriteExecute: V8's JIT needs writable executable memory.
# The data dir must stay exec-able: the SQLite addon is extracted into DATA_DIR/.cache.
NoNewPrivileges=true
ProtectSystem=strict
ReadWritePaths=$DATA_DIR
ProtectHome=true
PrivateTmp=true
PrivateDevices=true
ProtectKernelTunables=true
ProtectKernelModules=true
ProtectControlGroups=true
RestrictSUIDSGID=true
LockPersonality=true

[Install]
WantedBy=multi-user.target
EOF
}

if [ "$PRINT_UNIT" = 1 ]; then unit; exit 0; fi

[ "$(id -u)" = 0 ] || die "run as root (sudo ./install.sh): it creates a system user and writes to $PREFIX"

systemd_running() { [ "$SYSTEMD" = 1 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

if [ "$UNINSTALL" = 1 ]; then
  # --no-systemd leaves the unit alone (a test's uninstall must not touch a real install).
  if [ "$SYSTEMD" = 1 ] && [ -f "$UNIT_FILE" ]; then
    if systemd_running; then
      systemctl disable --now telemetryd.service >/dev/null 2>&1 || true
    fi
    rm -f "$UNIT_FILE"
    systemd_running && systemctl daemon-reload
    say "removed $UNIT_FILE"
  fi
  if [ -e "$EXE" ]; then rm -f "$EXE"; say "removed $EXE"; fi
  say "kept the data in $DATA_DIR and the user '$SERVICE_USER' that owns it (remove both by hand if you want them gone)"
  exit 0
fi

# 1. The executable.
cd "$(dirname "$0")"
if [ -n "$BINARY" ]; then
  [ -f "$BINARY" ] || die "--binary $BINARY: no such file"
elif [ "$BUILD" = 0 ]; then
  BINARY=dist/telemetryd
  [ -f "$BINARY" ] || die "dist/telemetryd is not built (leave out --no-build to build it)"
else
  [ -f package.json ] && [ -f scripts/build-binary.mjs ] || die "run from a telemetryd checkout, or pass --binary FILE"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    die "Node.js (20.19 or later) and npm are needed to build the executable, and were not found.
  Install them first (Debian 13: apt-get install nodejs npm; Debian 12: Node.js 20+ from
  NodeSource or nodejs.org), or install a built executable with: ./install.sh --binary FILE"
  fi
  node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' \
    || die "Node.js $(node --version) is too old to build: 20.19 or later is needed"
  # Build prerequisites of the SQLite addon (node-gyp): a C++ compiler, make, python3.
  missing=()
  for tool in python3:python3 make:make g++:g++ tar:tar; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "missing build tools: ${missing[*]} (install them, then run again)"
    say "installing build prerequisites: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  say "building (npm ci && npm run build:binary; the first build compiles the SQLite addon, a few minutes)"
  npm ci --no-audit --no-fund
  npm run build:binary
  BINARY=dist/telemetryd
fi
"$BINARY" version >/dev/null || die "$BINARY does not run here"

mkdir -p "$PREFIX"
# Copy under a temp name, then rename: a running service keeps its old file ("text file busy"
# never happens) and nobody sees half an executable.
tmp="$PREFIX/.telemetryd.$$.tmp"
cp "$BINARY" "$tmp"
chmod 0755 "$tmp"
mv -f "$tmp" "$EXE"
say "installed $EXE ($("$EXE" version))"

# 2. System user and data directory.
if ! id -u "$SERVICE_USER" >/dev/null 2>&1; then
  nologin=$(command -v nologin || echo /usr/sbin/nologin)
  useradd --system --user-group --home-dir "$DATA_DIR" --no-create-home --shell "$nologin" "$SERVICE_USER"
  say "created system user '$SERVICE_USER'"
fi
mkdir -p "$DATA_DIR"
chown "$SERVICE_USER:$SERVICE_USER" "$DATA_DIR"
chmod 0700 "$DATA_DIR"
say "data directory $DATA_DIR (owner $SERVICE_USER, mode 0700)"

# 3. The systemd unit.
if ! systemd_running; then
  if [ "$SYSTEMD" = 0 ]; then say "--no-systemd: service unit not installed"
  else say "systemd is not running here (no /run/systemd/system): service unit not installed"; fi
  say "start by hand with: runuser -u $SERVICE_USER -- $EXE serve --data-dir $DATA_DIR"
  exit 0
fi
new_unit=$(unit)
if [ ! -f "$UNIT_FILE" ] || [ "$(cat "$UNIT_FILE")" != "$new_unit" ]; then
  printf '%s\n' "$new_unit" >"$UNIT_FILE"
  say "wrote $UNIT_FILE"
fi
systemctl daemon-reload
systemctl enable telemetryd.service >/dev/null 2>&1
# restart, not start: a second run installs a new executable, which must be the one running.
systemctl restart telemetryd.service
say "telemetryd.service enabled and running; first start prints the setup URL: journalctl -u telemetryd"
