// Package profile is the board model: what a mock GPU node looks like.
// Profiles are YAML, read strictly (unknown fields are errors), validated in
// one pass so a user fixes every problem at once, and built in by name.
package profile
