# shardstream: every entry point a person or CI needs.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
PROTO  := proto/shardstream/proto/v1/loader.proto
GEN    := proto/shardstream/proto/v1
# A CPU build of torch; the project's own requirement is a range.
TORCH  ?= torch==2.13.0
# The torchvision release made for that torch (0.28.x for 2.13): the reference the image-folder
# tests compare with (tests/references.py). Its wheel here is a CUDA build that cannot import beside
# a CPU torch, so it goes into a directory of its own, not the environment (no `import torchvision`
# half-works for other packages); the tests load its pure-Python dataset code from there.
TORCHVISION ?= torchvision==0.28.0
REFERENCES := $(VENV)/references

.PHONY: setup demo test bench lint typecheck proto proto-check chart-config chart-config-check clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps --target $(REFERENCES) "$(TORCHVISION)"
	touch $@

# The native JPEG crop: built by the install above, and again when its source changes.
NATIVE := service/shardstream/service/transforms/_jpeg_crop.so
$(NATIVE): $(wildcard service/native/*.c service/native/*.h) service/build_native.py | $(VENV)/.installed
	$(PY) service/build_native.py

setup: $(VENV)/.installed $(NATIVE)

demo: setup
	$(PY) examples/demo.py

# Two test processes, each given whole modules (a module's fixtures start its service, Ray job or
# cluster once): about half the machine's CPU sat idle in one process, waiting on Ray and the network.
TEST_WORKERS ?= 2

test: setup proto-check chart-config-check lint typecheck
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile

# Side by side: shardstream, DataLoader, Ray Data, SPDL and (where TensorFlow installs) tf.data service;
# then samples/s against the number of decode nodes (a chart), and shuffled reads of a dataset 4x
# larger than the decoders' memory (local files and gs://), the prepared-sample cache on two
# decode nodes, decode capacity that follows demand against a static pool, and language-model data
# (a tokenized, packed mixture) against a DataLoader.
bench: setup
	$(PIP) install -q -e ".[dev,bench]"
	$(PIP) install -q "tensorflow-cpu>=2.15" || echo "tensorflow-cpu did not install: the tf.data service column will be skipped"
	@# SPDL decodes with FFmpeg's shared libraries (Debian/Ubuntu packages; root, or the column is skipped)
	-DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libavcodec59 libavformat59 libavfilter8 libavdevice59 >/dev/null 2>&1 || echo "FFmpeg's libraries did not install: the SPDL column will be skipped"
	$(PY) -m bench
	$(PY) -m bench.scaling
	$(PY) -m bench.shuffled_reads --gcs
	$(PY) -m bench.prepared_peers
	$(PY) -m bench.decode_scaling
	$(PY) -m bench.llm

lint: setup
	$(VENV)/bin/ruff check .

typecheck: setup
	$(VENV)/bin/mypy

# Regenerate the gRPC modules from the .proto (the one command for it).
proto: setup
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --grpc_python_out=proto --pyi_out=proto $(PROTO)

# Fails when the checked-in generated modules are stale.
proto-check: setup
	@tmp=$$(mktemp -d) && \
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$$tmp --grpc_python_out=$$tmp --pyi_out=$$tmp $(PROTO) && \
	for f in loader_pb2.py loader_pb2_grpc.py loader_pb2.pyi; do \
	  cmp -s $$tmp/shardstream/proto/v1/$$f $(GEN)/$$f || { echo "$(GEN)/$$f is stale: run 'make proto'"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "generated protobuf modules are up to date"

# Rewrite the chart's `config` values, schema and ConfigMap keys from ServiceConfig's settings.
chart-config: setup
	$(PY) service/chart_config.py

# Fails when they are stale.
chart-config-check: setup
	$(PY) service/chart_config.py --check

clean:
	rm -rf $(VENV) .demo build dist
