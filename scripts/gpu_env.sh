# Sourced by the bundle's GPU scripts (gpu_run.sh, gpu_serve_check.sh, gpu_http_load.sh,
# gpu_targets.sh) after they set HERE (the bundle's folder): finds the machine's cuBLASLt (the
# CUDA toolkit's, too large to carry) and exports CUBLAS_DIR (empty: not found) and
# LD_LIBRARY_PATH = CUBLAS_DIR:HERE:<what it was>.
CUBLAS_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13.0/lib64 /usr/lib/x86_64-linux-gnu; do
  if [ -e "$d/libcublasLt.so.13" ]; then CUBLAS_DIR=$d; break; fi
done
if [ -z "$CUBLAS_DIR" ]; then
  f=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$f" ] && CUBLAS_DIR=$(dirname "$f")
fi
export CUBLAS_DIR
export LD_LIBRARY_PATH="${CUBLAS_DIR:+$CUBLAS_DIR:}$HERE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
