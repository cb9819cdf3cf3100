# Multi-stage build of every mightyETL binary into one small image.
# Which binary runs is chosen by the command (see docker-compose.yml).
#
# The build context is the allowlist in .dockerignore: it holds no .git, so
# the Go toolchain cannot stamp the commit; pass it instead (`make image`
# does): --build-arg VERSION=$(git describe --tags --always --dirty)
# --build-arg COMMIT=$(git rev-parse HEAD) --build-arg MODIFIED=true|false.
# Unset, the binaries report version "(devel)" and commit "unknown"
# (`etlctl version`, mightyetl_build_info).
FROM golang:1.26-bookworm AS build
WORKDIR /src
# The public client is a module of its own, replaced by ./client in go.mod.
COPY go.mod go.sum ./
COPY client/ ./client/
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
ARG MODIFIED=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
      -X github.com/mightyetl/mightyetl/internal/buildinfo.version=${VERSION} \
      -X github.com/mightyetl/mightyetl/internal/buildinfo.commit=${COMMIT} \
      -X github.com/mightyetl/mightyetl/internal/buildinfo.modified=${MODIFIED}" \
    -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT []
CMD ["/usr/local/bin/worker"]
