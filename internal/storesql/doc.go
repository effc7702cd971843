// Package storesql holds what package store and the workers' statements
// (internal/workerstore) share: the predicates and column list their SQL is
// built from, array parameters in text form, the scan of a stored row, and
// the wrapping of database errors. Both build their statements from
// internal/tables; neither exports these pieces.
package storesql
