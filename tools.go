//go:build tools

// Package mightyetl pins module requirements that packages under construction
// import; removed once every dependency has a real importer.
package mightyetl

import (
	_ "github.com/getkin/kin-openapi/openapi3filter"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgxlisten"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/pressly/goose/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/testcontainers/testcontainers-go/modules/postgres"
	_ "go.uber.org/goleak"
	_ "golang.org/x/crypto/argon2"
	_ "golang.org/x/crypto/bcrypt"
)
