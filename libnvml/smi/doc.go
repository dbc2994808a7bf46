// Package smi tests the mock library against the real nvidia-smi releases from
// Debian: every view the project supports, compared with golden files and
// with the profile the snapshot was compiled from.
package smi
