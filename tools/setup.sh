#!/usr/bin/env bash
# Installs what grove's build needs on Debian 12 (bookworm), idempotently:
# Bazel 4 (bazel-bootstrap) with the platforms repository, GoogleTest,
# nlohmann_json, CLI11, LLVM 14, zlib and ncurses (for LLVM's static link),
# Boost.Asio/Beast and prometheus-cpp (grove serve), gRPC C++ with protobuf, protoc
# and grpc_cpp_plugin (grove serve --grpc-port), SentencePiece (libsentencepiece-dev
# for the LLM tokenizer's shim, sentencepiece's spm_train for its tests), DLPack's
# header (the C API), Python 3 with PyTorch (CPU), NumPy, requests, grpcio and
# protobuf (the Python package and its tests), venv and pip (tools/test_wheel.sh
# installs grove's wheel), curl and wrk (the HTTP server's tests), and checks that
# the CUDA Toolkit (nvcc, libcudart_static.a) is at /usr/local/cuda.
# Fast when everything is there: it only asks dpkg.
set -euo pipefail

packages=(bazel-bootstrap bazel-platforms libgtest-dev nlohmann-json3-dev llvm-14-dev
          zlib1g-dev libncurses-dev clang-format libcli11-dev libboost-dev
          prometheus-cpp-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
          libsentencepiece-dev sentencepiece
          libdlpack-dev python3 python3-torch python3-torchvision python3-numpy python3-requests python3-grpcio
          python3-protobuf python3-venv python3-pip curl wrk)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo_cmd apt-get install -y -qq "${missing[@]}" >/tmp/grove-setup-apt.log 2>&1; then
    echo "setup: package lists may be stale; running apt-get update once"
    $sudo_cmd apt-get update -qq >>/tmp/grove-setup-apt.log 2>&1
    $sudo_cmd apt-get install -y -qq "${missing[@]}" >>/tmp/grove-setup-apt.log 2>&1 || {
      echo "setup: apt-get install failed; see /tmp/grove-setup-apt.log" >&2
      tail -20 /tmp/grove-setup-apt.log >&2
      exit 1
    }
  fi
  echo "setup: installed ${#missing[@]} package(s)"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi

cuda=/usr/local/cuda
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/lib64/libcudart_static.a" ]; then
  echo "setup: the CUDA Toolkit is missing at $cuda (nvcc and libcudart_static.a are needed" \
       "to build; a GPU is not)" >&2
  exit 1
fi
echo "setup: CUDA Toolkit found: $("$cuda/bin/nvcc" --version | tail -1)"
