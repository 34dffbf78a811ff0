#!/usr/bin/env bash
# Debian packages the tests use, installed when missing. Best effort: it needs
# apt-get and root (or sudo without a password), and it never fails, because
# each test that needs one of these skips, saying why, when it is absent:
#   qemu-user   qemu-x86_64: native binaries checked on an emulated AVX2-only CPU
#   gcc         the AVX-512 control program of that same test
#   prometheus  a real Prometheus scraping the embedded stack (tests/e2e)
#   chromium, chromium-driver  the console driven in a real headless browser (tests/console)
# Called by `make test` and .ci/run.
set -u

missing=()
command -v qemu-x86_64 >/dev/null 2>&1 || missing+=(qemu-user)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0

say() { echo "system-deps: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get; not installing ${missing[*]} (the tests that need them will skip)"
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    say "not root and no password-less sudo; not installing ${missing[*]} (the tests that need them will skip)"
    exit 0
fi

say "installing ${missing[*]}"
if "${sudo[@]}" apt-get update -qq \
    && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    say "installed ${missing[*]}"
else
    say "could not install ${missing[*]}; the tests that need them will skip"
fi
exit 0
