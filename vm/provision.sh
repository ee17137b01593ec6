#!/usr/bin/env bash
# Provision a machine for the StarNet testbed: the Vagrant VM (Vagrantfile) or a bare Ubuntu
# 22.04/24.04 machine, as root:
#
#     sudo vm/provision.sh [REPO_DIR]
#
# 1. Debian/Ubuntu packages the project needs (the Makefile's APT_PACKAGES: Mininet, iperf3, ...).
# 2. p4lang's prebuilt p4c, BMv2 (simple_switch_grpc) and PI from p4lang's package repository on
#    the openSUSE Build Service, for the running Ubuntu release and architecture; the installed
#    versions are held (apt-mark hold) and printed. P4C_VERSION, BMV2_VERSION and PI_VERSION pick
#    exact versions; P4LANG_OBS points at another mirror of the repository.
# 3. The project's venv (make venv).
# 4. A check that prints every tool's version and fails loudly: exit 1 when something the testbed
#    needs is missing, exit 3 when only the BMv2 toolchain is (then `make run` uses the soft data
#    plane, and the lines above say exactly what could not be installed and why), exit 0 when all
#    is there.
#
# STARNET_VENV=DIR keeps the venv there instead of REPO_DIR/.venv (written to /etc/starnet/venv,
# which the Makefile reads): the VM's repository is a folder shared with the host.
#
# Safe to re-run: installed packages are skipped, the repository key and source are rewritten with
# the same content. It never adds a package source it could not reach first. PROVISION_OS="ID
# VERSION" (e.g. "ubuntu 22.04") overrides /etc/os-release, for tests.
set -euo pipefail

REPO_DIR="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"
P4LANG_OBS="${P4LANG_OBS:-https://download.opensuse.org/repositories/home:/p4lang}"
P4_PACKAGES=(p4lang-p4c p4lang-bmv2 p4lang-pi)
SUPPORTED_UBUNTU=(22.04 24.04)
KEYRING=/etc/apt/keyrings/p4lang.gpg
SOURCE_LIST=/etc/apt/sources.list.d/p4lang.list
NOT_INSTALLED=()
if [[ -n "${STARNET_VENV:-}" ]]; then
    install -d -m 0755 /etc/starnet
    echo "${STARNET_VENV}" >/etc/starnet/venv
fi
VENV_DIR="$(cat /etc/starnet/venv 2>/dev/null || echo "${REPO_DIR}/.venv")"

say() { printf '==> %s\n' "$*"; }
warn() { printf '!!! %s\n' "$*" >&2; }

if [[ ${EUID} -ne 0 ]]; then
    warn "run as root (sudo $0): it installs packages"
    exit 1
fi

read_os() {
    if [[ -n "${PROVISION_OS:-}" ]]; then
        read -r OS_ID OS_VERSION <<<"${PROVISION_OS}"
    else
        # shellcheck source=/dev/null
        OS_ID="$(. /etc/os-release && echo "${ID}")"
        # shellcheck source=/dev/null
        OS_VERSION="$(. /etc/os-release && echo "${VERSION_ID:-unknown}")"
    fi
    ARCH="$(dpkg --print-architecture)"
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

ensure_packages() {
    local missing=() p
    for p in "$@"; do
        installed "${p}" || missing+=("${p}")
    done
    if ((${#missing[@]})); then
        say "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
}

p4lang_packages() {
    local supported=0 v url pkg spec specs=()
    for v in "${SUPPORTED_UBUNTU[@]}"; do
        [[ "${OS_ID}" == ubuntu && "${OS_VERSION}" == "${v}" ]] && supported=1
    done
    if ((!supported)) || [[ "${ARCH}" != amd64 && "${ARCH}" != arm64 ]]; then
        NOT_INSTALLED+=("p4c, BMv2, PI: p4lang publishes no packages for ${OS_ID} ${OS_VERSION} (${ARCH}); use Ubuntu ${SUPPORTED_UBUNTU[*]} on amd64 or arm64, or build them from source")
        return
    fi
    url="${P4LANG_OBS}/xUbuntu_${OS_VERSION}"
    say "p4lang's repository for Ubuntu ${OS_VERSION}: ${url}"
    if ! curl -fsS --max-time 20 -o /dev/null "${url}/Release"; then
        NOT_INSTALLED+=("p4c, BMv2, PI: p4lang's repository is unreachable or has no Ubuntu ${OS_VERSION} release (${url}/Release)")
        return
    fi
    install -d -m 0755 /etc/apt/keyrings
    curl -fsS --max-time 20 "${url}/Release.key" | gpg --dearmor --yes -o "${KEYRING}"
    echo "deb [signed-by=${KEYRING}] ${url}/ /" >"${SOURCE_LIST}"
    apt-get update -qq
    for pkg in "${P4_PACKAGES[@]}"; do
        case "${pkg}" in
            p4lang-p4c) spec="${pkg}${P4C_VERSION:+=${P4C_VERSION}}" ;;
            p4lang-bmv2) spec="${pkg}${BMV2_VERSION:+=${BMV2_VERSION}}" ;;
            *) spec="${pkg}${PI_VERSION:+=${PI_VERSION}}" ;;
        esac
        specs+=("${spec}")
    done
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --allow-change-held-packages "${specs[@]}"; then
        NOT_INSTALLED+=("p4c, BMv2, PI: apt-get install ${specs[*]} failed (see above)")
        return
    fi
    apt-mark hold "${P4_PACKAGES[@]}" >/dev/null
}

version_of() {  # LINES TOOL ARGS...: the first LINES of the tool's version output on one line, or ""
    local lines=$1 tool=$2
    shift 2
    command -v "${tool}" >/dev/null 2>&1 || return 0
    "${tool}" "$@" 2>&1 | head -n "${lines}" | tr -s '\n' ' ' | cut -c 1-90 || true
}

venv_version() {  # the project's venv answers with its Python and grpcio, or ""
    (cd "${REPO_DIR}" && "${VENV_DIR}/bin/python" -c 'import sys, controller, softswitch, testbed, mininet, grpc
print("python", sys.version.split()[0], "grpcio", grpc.__version__)') 2>/dev/null || true
}

check() {
    local failed=0 name version
    say "check"
    while IFS='|' read -r name version; do
        if [[ -n "${version}" ]]; then
            printf '  %-20s %s\n' "${name}" "${version}"
        else
            printf '  %-20s MISSING\n' "${name}"
            failed=1
        fi
    done <<EOT
mininet|$(version_of 1 mn --version)
iperf3|$(version_of 1 iperf3 --version)
ip (iproute2)|$(version_of 1 ip -V)
project venv|$(venv_version)
EOT
    local tools_missing=0
    for name in p4c-bm2-ss simple_switch_grpc; do
        version="$(version_of 2 "${name}" --version)"
        printf '  %-20s %s\n' "${name}" "${version:-not installed}"
        if [[ -z "${version}" ]]; then
            NOT_INSTALLED+=("${name}: not on PATH")
            tools_missing=1
        fi
    done
    if ((!tools_missing && ${#NOT_INSTALLED[@]})); then  # built from source, say: BMv2 works all the same
        say "p4lang's packages are not installed (${NOT_INSTALLED[0]}), but the tools are on PATH"
        NOT_INSTALLED=()
    fi
    for name in "${P4_PACKAGES[@]}"; do
        if installed "${name}"; then
            printf '  %-20s %s%s\n' "${name}" "$(dpkg-query -W -f='${Version}' "${name}")" \
                "$(apt-mark showhold | grep -qx "${name}" && echo ' (held)')"
        fi
    done
    if ((failed)); then
        warn "FAILED: the testbed's own tools are missing (above); see the output before the check"
        exit 1
    fi
    if ((${#NOT_INSTALLED[@]})); then
        warn "NOT INSTALLED:"
        printf '!!!   %s\n' "${NOT_INSTALLED[@]}" >&2
        warn "the testbed works on its soft data plane: make run (DATAPLANE=auto picks soft); the bmv2 tests skip"
        exit 3
    fi
    say "ready: sudo make run (DATAPLANE=auto picks BMv2), sudo make test"
}

read_os
say "StarNet provisioning of ${REPO_DIR} on ${OS_ID} ${OS_VERSION} (${ARCH})"
ensure_packages make curl gnupg ca-certificates python3-venv
make -C "${REPO_DIR}" --no-print-directory apt
p4lang_packages
make -C "${REPO_DIR}" --no-print-directory venv
check
