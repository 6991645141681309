//! On-disk spool (in progress).
