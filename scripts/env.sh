# Sourced by the scripts: puts the CUDA toolkit on PATH when it is installed in the usual place.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
FA_JOBS=${FA_JOBS:-$(nproc)}
export FA_JOBS
