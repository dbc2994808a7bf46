module github.com/nvmock/nvmock

go 1.26.8

require (
	github.com/NVIDIA/go-nvlib v0.12.0
	github.com/NVIDIA/go-nvml v0.13.4-1
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
