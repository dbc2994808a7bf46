# nvmock build. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
CC ?= gcc
# As the scripts take them: a shared cache or build directory.
CACHE := $(or $(NVMOCK_CACHE),$(CURDIR)/.cache)
BUILD := $(or $(NVMOCK_BUILD),$(CURDIR)/build)
export PATH := $(CACHE)/bin:$(PATH)

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

# go-nvml's nvml.h is the ABI source of truth; read it from the module cache.
NVML_H_DIR = $(shell $(GO) mod download -json github.com/NVIDIA/go-nvml | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/pkg/nvml
CFLAGS_LIB := -std=gnu11 -O2 -g -fPIC -Wall -Wextra -Werror -fvisibility=hidden
LIBDIR := $(BUILD)/driver/usr/lib64
# The built tree names the library after the driver of its built-in default
# (the a100 profile), as nvidia-ctk expects; hostprep renames it after each
# overlay's profile.
DRIVER_VERSION := $(shell awk '/^driver:/ {d = 1} d && $$1 == "version:" {print $$2; exit}' profile/builtin/a100.yaml)
LIB := $(LIBDIR)/libnvidia-ml.so.$(DRIVER_VERSION)
LIB_SRCS := $(wildcard libnvml/*.c)
LIB_HDRS := $(wildcard libnvml/*.h)
NVMOCK := $(BUILD)/bin/nvmock
HOOK := $(BUILD)/bin/nvmock-hook
IMEX := $(BUILD)/driver/usr/bin/nvidia-imex
DEFAULT_SNAPSHOT := $(BUILD)/default.snapshot
NVIDIA_SMI := $(CACHE)/bin/nvidia-smi
GO_SRCS := $(shell find . -name '*.go' -not -path './.cache/*' -not -path './build/*') go.mod go.sum $(wildcard profile/builtin/*.yaml)

.PHONY: help build lib cli driver infiniband image test e2e bench fuzz lint demo generate deps k8s-tools hwloc-nvml clean

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: lib cli $(IMEX) ## build the CLI, the mock libnvidia-ml and nvidia-imex

# driver: the complete driver tree hostprep and exec install (the real
# nvidia-smi beside the library); needs make deps.
driver: build infiniband ## the driver tree hostprep and exec install: the library, the real nvidia-smi, the InfiniBand planes
	hack/package-driver.sh $(BUILD) $(NVIDIA_SMI)

# The InfiniBand planes loaded into programs (ibshim): the umad shim, and the
# libibverbs provider, built against rdma-core's private provider headers
# (fetched once into .cache).
UMAD_SHIM := $(LIBDIR)/nvmock/libnvmock-umad.so
infiniband: $(UMAD_SHIM)
	hack/fetch-rdma-core.sh $(CACHE)
	ibshim/verbs/build.sh $(CACHE) $(LIBDIR)/libibverbs

$(UMAD_SHIM): ibshim/umad/umad.c ibshim/umad/providers.c ibshim/umad/channels.c ibshim/umad/shim.h ibshim/umad/proto.h ibshim/umad/shim.map ibshim/umad/build.sh
	hack/fetch-rdma-core.sh $(CACHE)
	CC=$(CC) ibshim/umad/build.sh $(dir $@) $(CACHE)

cli: $(NVMOCK) $(HOOK)
lib: $(LIB)

# Static: the same binary runs on the host, in the image (which has no libc)
# and in tests.
$(NVMOCK): $(GO_SRCS)
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/nvmock

# The runtime hook that shows the PCI tree in the containers the plugin
# edits; hostprep installs it in the overlay. C and static: it runs once per
# container creation, on hosts of any libc.
$(HOOK): pcisim/hook/hook.c
	@mkdir -p $(dir $@)
	$(CC) -static -O2 -Wall -Wextra -Werror -o $@ $<

# The IMEX daemon and its control tool (one binary) that NVL72 overlays
# carry in their driver root: C and static, as it runs in other people's
# images (NVIDIA's DRA driver's).
$(IMEX): imex/imex.c
	@mkdir -p $(dir $@)
	$(CC) -static -O2 -s -Wall -Wextra -Werror -o $@.tmp $< && mv $@.tmp $@

$(DEFAULT_SNAPSHOT): $(NVMOCK)
	$(NVMOCK) profile compile a100 --unseeded -o $@

$(LIB): $(LIB_SRCS) $(LIB_HDRS) $(DEFAULT_SNAPSHOT)
	@mkdir -p $(LIBDIR)
	$(CC) $(CFLAGS_LIB) -I$(NVML_H_DIR) -Ilibnvml -DNVMOCK_DEFAULT_SNAPSHOT='"$(DEFAULT_SNAPSHOT)"' \
		-shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,defs -Wl,--no-undefined \
		-o $@.tmp $(LIB_SRCS) -lpthread -ldl -lm
	strip --strip-unneeded $@.tmp && mv $@.tmp $@
	find $(LIBDIR) -name 'libnvidia-ml.so.*.*' ! -name $(@F) -delete
	ln -sf $(@F) $(LIBDIR)/libnvidia-ml.so.1
	ln -sf libnvidia-ml.so.1 $(LIBDIR)/libnvidia-ml.so

deps: ## install missing Debian packages; fetch nvidia-smi, pynvml, gpustat, nvtop, nvitop, slurmd, NVIDIA's tools, nfd-worker, node-problem-detector and gpud into .cache
	hack/install-deps.sh
	hack/fetch-nvidia-smi.sh $(CACHE)
	hack/fetch-pynvml.sh $(CACHE)
	hack/fetch-monitors.sh $(CACHE)
	hack/fetch-slurm.sh $(CACHE)
	hack/fetch-nvidia-tools.sh $(CACHE)
	hack/fetch-nfd.sh $(CACHE)
	hack/fetch-npd.sh $(CACHE)
	hack/fetch-gpud.sh $(CACHE)

# hwloc's NVML plugin from Debian's contrib, for the system's lstopo.
hwloc-nvml:
	hack/fetch-hwloc.sh $(CACHE)

k8s-tools: ## build Kubernetes v1.37 (etcd, control plane, kubelet, kubectl, CNI) and NVIDIA's DRA driver with its image into .cache (once per version; 30 min cold, minutes with a warm Go cache)
	hack/k8s-node.sh build
	hack/fetch-dra-driver.sh $(CACHE)
	NVMOCK_CACHE=$(CACHE) hack/k8s/dra-images.sh build

# The image's tag follows the chart's appVersion, so the chart's defaults find it.
IMAGE ?= ghcr.io/nvmock/nvmock:$(shell sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' charts/nvmock/Chart.yaml 2>/dev/null || echo dev)

image: driver ## the nvmock image as an OCI archive, build/nvmock-image.tar (no Docker; the Dockerfile builds the same)
	hack/image.sh $(BUILD) $(IMAGE)

generate: ## regenerate code from go-nvml's nvml.h, the snapshot schema and the built-in profiles
	$(GO) run ./libnvml/gen/nvmlgen -header $(NVML_H_DIR)/nvml.h -out libnvml
	$(GO) test -count=1 -run '^TestGeneratedBuiltins$$' ./profile/ -update

TEST_ENV = NVMOCK_BUILD=$(BUILD) NVMOCK_CACHE=$(CACHE) NVML_H_DIR=$(NVML_H_DIR)

test: deps k8s-tools driver image hwloc-nvml ## run every test (Go, C, real nvidia-smi, go-nvml, pynvml; as root also the e2e suite on a real containerd)
	$(TEST_ENV) hack/test.sh

e2e: deps driver image ## the end-to-end suite alone: a real containerd with NRI and CDI, the plugin, real containers (root)
	$(TEST_ENV) hack/test.sh e2e

bench: deps k8s-tools driver image ## benchmarks: Go (through the C ABI), whole-process timings, and (as root) containers on a real containerd and pod startup on the Kubernetes node
	NVMOCK_BUILD=$(BUILD) $(GO) test -tags integration -run '^$$' -bench . ./libnvml/... ./live/ ./pcisim/ ./pcisim/hook/ ./plugin/inject/ ./ibshim/... ./profile/ ./hostprep/
	hack/bench.sh $(BUILD) $(NVIDIA_SMI)
	@if [ "$$(id -u)" != 0 ]; then echo 'e2e and Kubernetes benchmarks: not run (need root: they start containerd)'; exit 0; fi; \
	trap 'hack/e2e-node.sh down' EXIT; hack/e2e-node.sh up && \
	NVMOCK_CACHE=$(CACHE) $(GO) test -tags e2e -run '^$$' -bench . -benchtime=20x ./e2e/ && \
	hack/e2e-node.sh down && \
	NVMOCK_K8S_BENCH_PODS=20 hack/k8s-e2e.sh -run 'TestPodStartupWithAndWithoutInjection'

FUZZTIME ?= 60s
fuzz: ## fuzz what users, pods, node programs and peer daemons write (profiles, the plugin's inputs, the runtime hook's state and config.json, nvidia-imex's config, the IB daemon's socket and peer links, ctl apply files) and a damaged live state file for FUZZTIME each (default 60s); a failing case is saved under testdata/fuzz, which make test runs
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./profile/
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./plugin/inject/
	$(GO) test -run '^$$' -fuzz '^FuzzProfile$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./hostprep/
	$(GO) test -run '^$$' -fuzz '^FuzzProgramMessages$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./ibshim/ibd/
	$(GO) test -run '^$$' -fuzz '^FuzzPeerFrames$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./ibshim/ibd/
	$(GO) test -run '^$$' -fuzz '^FuzzStateFile$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./live/
	$(GO) test -tags integration -run '^$$' -fuzz '^FuzzHookJSON$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./pcisim/hook/
	$(GO) test -tags integration -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0 ./imex/

lint: ## gofmt, go vet, C warnings as errors, generate-diff check
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet -tags integration ./...
	$(GO) vet -tags e2e ./e2e/
	$(GO) vet -tags k8s ./e2e/k8s/
	$(MAKE) -B lib
	$(GO) test -count=1 -run 'TestGenerated' ./libnvml/gen/ ./profile/

demo: deps driver image ## the real nvidia-smi on mock GPUs: 8 A100s, an H100 node through nvmock exec, then (as root) in a real container
	hack/demo.sh $(BUILD) $(NVIDIA_SMI)

clean: ## remove build outputs (keeps the download cache)
	rm -rf $(BUILD)
