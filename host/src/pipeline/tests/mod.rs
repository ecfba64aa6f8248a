//! Unit tests of the pipeline: in-memory datasets and ops written here, driven through the
//! real loader.
