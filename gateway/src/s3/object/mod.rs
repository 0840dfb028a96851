//! The object family: one module per group of object operations.
//!
//! - [`put`], PutObject (and the upload path PostObject shares)
//! - [`get`], GetObject and HeadObject
//! - [`copy`], CopyObject
//! - [`delete`], DeleteObject and DeleteObjects
//! - [`tagging`], object and bucket tagging
//! - [`attributes`], GetObjectAttributes

pub mod attributes;
pub mod copy;
pub mod delete;
pub mod get;
pub mod put;
pub mod tagging;
