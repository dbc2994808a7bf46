# The nvmock image for those with Docker; `make image` assembles the same
# root as an OCI archive without it. Build the root first:
#   make image && docker build -t ghcr.io/nvmock/nvmock:0.1.0 .
FROM scratch
COPY build/image-root/ /
ENV PATH=/opt/nvmock/bin
ENTRYPOINT ["/opt/nvmock/bin/nvmock"]
