"""K-line (OHLCV candlestick) and multivariate time-series forecasting: KLineDataModule and KLineForecaster."""

__all__: list[str] = []
