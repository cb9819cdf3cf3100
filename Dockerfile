# Multi-stage build of every mightyETL binary into one small image.
# Which binary runs is chosen by the command (see docker-compose.yml).
FROM golang:1.26-bookworm AS build
WORKDIR /src
# The public client is a module of its own, replaced by ./client in go.mod.
COPY go.mod go.sum ./
COPY client/ ./client/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT []
CMD ["/usr/local/bin/worker"]
